"""Word counts from lines of text.

    printf 'the cat\\nthe dog\\n' | streamkit produce lines --format text
    streamkit worker apps.wordcount --until-idle 2
    streamkit consume word-counts --from-beginning --timeout 1
"""
import re

import streamkit as sk

app = sk.App("wordcount")

lines = app.topic("lines", key_serde=sk.serdes.Void(), value_serde=sk.serdes.String(), partitions=3)

WORD = re.compile(r"[\w']+")


@app.topology
def build(b: sk.StreamsBuilder) -> None:
    (b.stream(lines)
       .flat_map_values(lambda line: WORD.findall(line.lower()))
       .group_by(lambda _, word: word)
       .count(name="word-counts")
       .to_stream()
       .to("word-counts"))
