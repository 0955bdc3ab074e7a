"""Page views per page: filter big views, normalise the page, count per page.

    streamkit worker apps.pageviews --until-idle 2
    streamkit consume page-counts --from-beginning --timeout 1
"""
import streamkit as sk

app = sk.App("pageviews")

views = app.topic("pageviews", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json(), partitions=3)


@app.topology
def build(b: sk.StreamsBuilder) -> None:
    (b.stream(views, timestamp=lambda key, value: value["ts"])
       .filter(lambda key, value: value["amount"] > 10)
       .map_values(lambda value: {**value, "page": value["page"].lower()})
       .group_by(lambda key, value: value["page"])
       .count(name="page-counts")
       .to_stream()
       .to("page-counts"))
