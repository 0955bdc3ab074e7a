// The reference side of tests/parity/: runs each case through Apache Kafka Streams' own
// TopologyTestDriver and reports every output record with the input record that caused it.
//
// usage: java -cp ... KafkaStreamsReference STATE_DIR
// stdin: one JSON request per line
//   {"family": "...", "params": {...}, "records": [[topic, key, value, timestamp], ...],
//    "counterfactual": ["..."]}
// stdout: one JSON reply per request, in order, flushed at once
//   {"outputs": [[key, value, timestamp, cause], ...], "error": null | "text"}
// where cause is the 0-based index of the piped record after which the output topic "out" held
// the record. A windowed key is written as [key, start, end]; values as text (Longs as digits).
//
// The topologies mirror tests/parity/topologies.py (same user functions on values "g:n").
// Counterfactuals change one thing in Kafka Streams, to test whether a difference is one named
// Kafka defect (tests/parity/defects.py):
//   "join-store-one-ms-longer"     stream-stream join stores keep one ms more than they report
//   "session-store-one-ms-longer"  session stores keep one ms more than gap + grace
//   "sliding-store-two-ms-longer"  sliding-window stores keep two ms more than 2 * difference + grace
//   "emit-on-window-close"         a suppressed session aggregation uses Kafka's own final-result
//                                  emit strategy (EmitStrategy.onWindowClose, KIP-825, RocksDB
//                                  time-ordered session store) instead of suppress(untilWindowCloses)
//   "cogroup-one-stream-time"      a windowed cogroup built as one windowed aggregation of the inputs
//                                  merged (one processor, so one stream time for all inputs)
//   "absent-tombstones-dropped"    a tombstone for a key without a value in its topic is not piped
//                                  (as if a table source dropped it; it still counts as a cause)
// Stores are in-memory, the record cache is off (every update is forwarded), and the outer join's
// wall-clock throttle is off (the driver's wall clock never moves).
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.TopologyConfig;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.kstream.Aggregator;
import org.apache.kafka.streams.kstream.EmitStrategy;
import org.apache.kafka.streams.kstream.Branched;
import org.apache.kafka.streams.kstream.CogroupedKStream;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.GlobalKTable;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindowedKStream;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindowedKStream;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.state.BuiltInDslStoreSuppliers;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.SessionStore;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.WindowBytesStoreSupplier;
import org.apache.kafka.streams.state.WindowStore;
import org.apache.kafka.streams.test.TestRecord;

import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

public final class KafkaStreamsReference {
    private static final ObjectMapper MAPPER = new ObjectMapper();
    private static final Consumed<String, String> STRINGS = Consumed.with(Serdes.String(), Serdes.String());
    private static int requestCount = 0;

    private KafkaStreamsReference() {
    }

    // ---- the user functions (topologies.py has the same) ----

    /** The amount of a value "g:n" ("n" alone counts too); 0 for null. */
    static long amount(String value) {
        if (value == null) {
            return 0;
        }
        return Long.parseLong(value.substring(value.indexOf(':') + 1));
    }

    /** The group (or foreign key) of a value "g:n"; null for a null value or the group "~". */
    static String group(String value) {
        if (value == null || value.indexOf(':') < 0) {
            return null;
        }
        String g = value.substring(0, value.indexOf(':'));
        return g.equals("~") ? null : g;
    }

    static String pair(String left, String right) {
        return (left == null ? "~" : left) + "&" + (right == null ? "~" : right);
    }

    static String doubled(String value) {
        return value == null ? null : value.substring(0, value.indexOf(':')) + ":" + (2 * amount(value));
    }

    static String lastThree(String aggregate, String value) {
        String joined = (aggregate == null ? "~" : aggregate) + "|" + (value == null ? "~" : value);
        String[] parts = joined.split("\\|", -1);
        return String.join("|", java.util.Arrays.copyOfRange(parts, Math.max(0, parts.length - 3), parts.length));
    }

    static final long[] COGROUP_WEIGHTS = {1, 100, 10000};

    static String text(Object value) {
        return value == null ? null : value.toString();
    }

    static Duration millis(JsonNode params, String field) {
        return Duration.ofMillis(params.get(field).asLong());
    }

    // ---- counterfactual stores ----

    /** A join window store that keeps one ms beyond the retention it reports to the join. */
    static final class OneMsLongerJoinStore implements WindowBytesStoreSupplier {
        private final WindowBytesStoreSupplier inner;
        private final long reportedRetention;

        OneMsLongerJoinStore(String name, long retention, long windowSize) {
            this.reportedRetention = retention;
            this.inner = Stores.inMemoryWindowStore(name, Duration.ofMillis(retention + 1),
                    Duration.ofMillis(windowSize), true);
        }

        @Override public String name() { return inner.name(); }
        @Override public WindowStore<Bytes, byte[]> get() { return inner.get(); }
        @Override public String metricsScope() { return inner.metricsScope(); }
        @Override public long segmentIntervalMs() { return inner.segmentIntervalMs(); }
        @Override public long windowSize() { return inner.windowSize(); }
        @Override public boolean retainDuplicates() { return true; }
        @Override public long retentionPeriod() { return reportedRetention; }
    }

    // ---- the topologies ----

    private static void toOut(KStream<String, String> stream) {
        stream.to("out", Produced.with(Serdes.String(), Serdes.String()));
    }

    private static <V> void tableToOut(KTable<String, V> table) {
        toOut(table.toStream().mapValues(KafkaStreamsReference::text));
    }

    private static <V> void windowedToOut(KTable<Windowed<String>, V> table) {
        toOut(table.toStream().map((w, v) -> {
            ArrayNode key = MAPPER.createArrayNode().add(w.key()).add(w.window().start()).add(w.window().end());
            return KeyValue.pair(key.toString(), text(v));
        }));
    }

    private static <V> Materialized<String, V, SessionStore<Bytes, byte[]>> sessionStore(
            JsonNode params, Set<String> counterfactual, org.apache.kafka.common.serialization.Serde<V> serde) {
        Materialized<String, V, SessionStore<Bytes, byte[]>> m = Materialized.with(Serdes.String(), serde);
        if (counterfactual.contains("emit-on-window-close")) {
            m = m.withStoreType(Materialized.StoreType.ROCKS_DB);  // the time-ordered store the strategy needs
        }
        if (counterfactual.contains("session-store-one-ms-longer")) {
            m = m.withRetention(Duration.ofMillis(params.get("gap").asLong() + params.get("grace").asLong() + 1));
        }
        return m;
    }

    /** A time-windowed store: the default retention, or for sliding windows two ms more than Kafka's
     *  2 * difference + grace ("sliding-store-two-ms-longer"). */
    private static <V> Materialized<String, V, WindowStore<Bytes, byte[]>> windowStore(
            JsonNode params, Set<String> counterfactual, org.apache.kafka.common.serialization.Serde<V> serde) {
        Materialized<String, V, WindowStore<Bytes, byte[]>> m = Materialized.with(Serdes.String(), serde);
        if (counterfactual.contains("sliding-store-two-ms-longer")) {
            m = m.withRetention(Duration.ofMillis(
                    2 * params.get("diff").asLong() + params.get("grace").asLong() + 2));
        }
        return m;
    }

    private static KTable<Windowed<String>, ?> windowedAggregation(StreamsBuilder builder, JsonNode params,
                                                                  Set<String> counterfactual) {
        return windowedAggregation(builder.stream("in", STRINGS).groupByKey(), params, counterfactual);
    }

    /** count, reduce (sum of amounts as text) or aggregate (sum) of a grouped stream per window. */
    private static KTable<Windowed<String>, ?> windowedAggregation(KGroupedStream<String, String> grouped,
                                                                  JsonNode params, Set<String> counterfactual) {
        String op = params.get("op").asText();
        String kind = params.get("window").asText();
        if (kind.equals("session")) {
            SessionWindowedKStream<String, String> sessions = grouped.windowedBy(
                    SessionWindows.ofInactivityGapAndGrace(millis(params, "gap"), millis(params, "grace")));
            if (counterfactual.contains("emit-on-window-close")) {
                sessions = sessions.emitStrategy(EmitStrategy.onWindowClose());
            }
            switch (op) {
                case "count":
                    return sessions.count(sessionStore(params, counterfactual, Serdes.Long()));
                case "reduce":
                    return sessions.reduce((a, b) -> String.valueOf(amount(a) + amount(b)),
                            sessionStore(params, counterfactual, Serdes.String()));
                default:
                    return sessions.aggregate(() -> 0L, (k, v, total) -> total + amount(v),
                            (k, left, right) -> left + right, sessionStore(params, counterfactual, Serdes.Long()));
            }
        }
        TimeWindowedKStream<String, String> windowed;
        if (kind.equals("sliding")) {
            windowed = grouped.windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(millis(params, "diff"),
                    millis(params, "grace")));
        } else {
            TimeWindows windows = TimeWindows.ofSizeAndGrace(millis(params, "size"), millis(params, "grace"));
            windowed = grouped.windowedBy(kind.equals("hopping") ? windows.advanceBy(millis(params, "advance")) : windows);
        }
        switch (op) {
            case "count":
                return windowed.count(windowStore(params, counterfactual, Serdes.Long()));
            case "reduce":
                return windowed.reduce((a, b) -> String.valueOf(amount(a) + amount(b)),
                        windowStore(params, counterfactual, Serdes.String()));
            default:
                return windowed.aggregate(() -> 0L, (k, v, total) -> total + amount(v),
                        windowStore(params, counterfactual, Serdes.Long()));
        }
    }

    private static TimeWindows timeWindows(JsonNode params) {
        TimeWindows windows = TimeWindows.ofSizeAndGrace(millis(params, "size"), millis(params, "grace"));
        return params.get("window").asText().equals("hopping") ? windows.advanceBy(millis(params, "advance")) : windows;
    }

    /** The windowed cogroup as one windowed aggregation of the inputs merged (their values tagged
     *  with the input), each value folded with its input's aggregator: one processor, so one stream
     *  time for all inputs ("cogroup-one-stream-time"). */
    private static KTable<Windowed<String>, Long> cogroupAsOneAggregation(StreamsBuilder builder, JsonNode params,
                                                                        Set<String> counterfactual) {
        KStream<String, String> merged = null;
        for (int n = 0; n < params.get("inputs").asInt(); n++) {
            KStream<String, String> stream = builder.stream("in" + (n + 1), STRINGS);
            if (n == 1 && params.get("regroup").asBoolean()) {
                stream = stream.selectKey((k, v) -> group(v));
            }
            final int input = n;
            KStream<String, String> tagged = stream.mapValues(v -> input + (v == null ? "N" : "V" + v));
            merged = merged == null ? tagged : merged.merge(tagged);
        }
        Aggregator<String, String, Long> dispatch = (k, tagged, total) -> total
                + COGROUP_WEIGHTS[tagged.charAt(0) - '0'] * amount(tagged.charAt(1) == 'N' ? null : tagged.substring(2));
        KGroupedStream<String, String> grouped = merged.groupByKey(Grouped.with(Serdes.String(), Serdes.String()));
        if (params.get("window").asText().equals("session")) {
            return grouped.windowedBy(SessionWindows.ofInactivityGapAndGrace(millis(params, "gap"), millis(params, "grace")))
                    .aggregate(() -> 0L, dispatch, (k, a, b) -> a + b, sessionStore(params, counterfactual, Serdes.Long()));
        }
        return grouped.windowedBy(timeWindows(params)).aggregate(() -> 0L, dispatch,
                Materialized.<String, Long, WindowStore<Bytes, byte[]>>with(Serdes.String(), Serdes.Long()));
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    private static void build(StreamsBuilder builder, String family, JsonNode params, Set<String> counterfactual) {
        switch (family) {
            case "windowed": {
                KTable table = windowedAggregation(builder, params, counterfactual);
                boolean emitsFinal = counterfactual.contains("emit-on-window-close")
                        && params.get("window").asText().equals("session");
                if (params.get("suppress").asBoolean() && !emitsFinal) {
                    table = table.suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()));
                }
                windowedToOut(table);
                return;
            }
            case "stream_join": {
                KStream<String, String> left = builder.stream("left", STRINGS);
                KStream<String, String> right = builder.stream("right", STRINGS);
                JoinWindows windows = JoinWindows.ofTimeDifferenceAndGrace(millis(params, "diff"), millis(params, "grace"));
                if (params.has("before")) {
                    windows = windows.before(millis(params, "before")).after(millis(params, "after"));
                }
                StreamJoined<String, String, String> joined =
                        StreamJoined.with(Serdes.String(), Serdes.String(), Serdes.String());
                if (counterfactual.contains("join-store-one-ms-longer")) {
                    long retention = windows.size() + windows.gracePeriodMs();
                    joined = joined
                            .withThisStoreSupplier(new OneMsLongerJoinStore("join-this", retention, windows.size()))
                            .withOtherStoreSupplier(new OneMsLongerJoinStore("join-other", retention, windows.size()));
                }
                String how = params.get("how").asText();
                toOut(how.equals("inner") ? left.join(right, KafkaStreamsReference::pair, windows, joined)
                        : how.equals("left") ? left.leftJoin(right, KafkaStreamsReference::pair, windows, joined)
                        : left.outerJoin(right, KafkaStreamsReference::pair, windows, joined));
                return;
            }
            case "stream_table_join": {
                KStream<String, String> left = builder.stream("left", STRINGS);
                KTable<String, String> right = builder.table("right", STRINGS);
                toOut(params.get("how").asText().equals("inner") ? left.join(right, KafkaStreamsReference::pair)
                        : left.leftJoin(right, KafkaStreamsReference::pair));
                return;
            }
            case "table_join": {
                KTable<String, String> left = builder.table("left", STRINGS);
                KTable<String, String> right = builder.table("right", STRINGS);
                String how = params.get("how").asText();
                tableToOut(how.equals("inner") ? left.join(right, KafkaStreamsReference::pair)
                        : how.equals("left") ? left.leftJoin(right, KafkaStreamsReference::pair)
                        : left.outerJoin(right, KafkaStreamsReference::pair));
                return;
            }
            case "foreign_key_join": {
                KTable<String, String> left = builder.table("left", STRINGS);
                KTable<String, String> right = builder.table("right", STRINGS);
                tableToOut(params.get("how").asText().equals("inner")
                        ? left.join(right, KafkaStreamsReference::group, KafkaStreamsReference::pair)
                        : left.leftJoin(right, KafkaStreamsReference::group, KafkaStreamsReference::pair));
                return;
            }
            case "table_aggregation": {
                var regrouped = builder.table("in", STRINGS).groupBy((k, v) -> KeyValue.pair(group(v), v),
                        Grouped.with(Serdes.String(), Serdes.String()));
                if (params.get("op").asText().equals("count")) {
                    tableToOut(regrouped.count());
                } else {
                    tableToOut(regrouped.aggregate(() -> 0L, (k, v, total) -> total + amount(v),
                            (k, v, total) -> total - amount(v),
                            Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>with(Serdes.String(), Serdes.Long())));
                }
                return;
            }
            case "stream_aggregation": {
                KStream<String, String> in = builder.stream("in", STRINGS);
                KGroupedStream<String, String> grouped = params.get("regroup").asBoolean()
                        ? in.groupBy((k, v) -> group(v), Grouped.with(Serdes.String(), Serdes.String()))
                        : in.groupByKey();
                String op = params.get("op").asText();
                if (op.equals("count")) {
                    tableToOut(grouped.count());
                } else if (op.equals("reduce")) {
                    tableToOut(grouped.reduce((a, b) -> String.valueOf(amount(a) + amount(b))));
                } else {
                    tableToOut(grouped.aggregate(() -> 0L, (k, v, total) -> total + amount(v),
                            Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>with(Serdes.String(), Serdes.Long())));
                }
                return;
            }
            case "global_table_join": {
                KStream<String, String> left = builder.stream("left", STRINGS);
                GlobalKTable<String, String> right = builder.globalTable("right", STRINGS);
                toOut(params.get("how").asText().equals("inner")
                        ? left.join(right, (k, v) -> group(v), KafkaStreamsReference::pair)
                        : left.leftJoin(right, (k, v) -> group(v), KafkaStreamsReference::pair));
                return;
            }
            case "cogroup": {
                if (counterfactual.contains("cogroup-one-stream-time") && !params.get("window").asText().equals("none")) {
                    windowedToOut(cogroupAsOneAggregation(builder, params, counterfactual));
                    return;
                }
                CogroupedKStream<String, Long> cogrouped = null;
                for (int n = 0; n < params.get("inputs").asInt(); n++) {
                    KStream<String, String> stream = builder.stream("in" + (n + 1), STRINGS);
                    KGroupedStream<String, String> grouped = n == 1 && params.get("regroup").asBoolean()
                            ? stream.groupBy((k, v) -> group(v), Grouped.with(Serdes.String(), Serdes.String()))
                            : stream.groupByKey();
                    long weight = COGROUP_WEIGHTS[n];
                    Aggregator<String, String, Long> aggregator = (k, v, total) -> total + weight * amount(v);
                    cogrouped = cogrouped == null ? grouped.cogroup(aggregator) : cogrouped.cogroup(grouped, aggregator);
                }
                String window = params.get("window").asText();
                if (window.equals("none")) {
                    tableToOut(cogrouped.aggregate(() -> 0L,
                            Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>with(Serdes.String(), Serdes.Long())));
                } else if (window.equals("session")) {
                    windowedToOut(cogrouped.windowedBy(
                            SessionWindows.ofInactivityGapAndGrace(millis(params, "gap"), millis(params, "grace")))
                            .aggregate(() -> 0L, (k, a, b) -> a + b, sessionStore(params, counterfactual, Serdes.Long())));
                } else {
                    windowedToOut(cogrouped.windowedBy(timeWindows(params)).aggregate(() -> 0L,
                            Materialized.<String, Long, WindowStore<Bytes, byte[]>>with(Serdes.String(), Serdes.Long())));
                }
                return;
            }
            case "branch_merge": {
                KStream<String, String> in = builder.stream("in", STRINGS);
                Map<String, KStream<String, String>> branches = in.split(Named.as("split-"))
                        .branch((k, v) -> amount(v) >= 6, Branched.as("big"))
                        .branch((k, v) -> "x".equals(group(v)), Branched.as("x"))
                        .defaultBranch(Branched.as("rest"));
                KStream<String, String> merged = branches.get("split-big").mapValues(KafkaStreamsReference::doubled)
                        .merge(branches.get("split-x")).merge(branches.get("split-rest"));
                if (params.get("with_source").asBoolean()) {
                    merged = merged.merge(in);
                }
                KGroupedStream<String, String> grouped = params.get("group").asBoolean()
                        ? merged.groupBy((k, v) -> group(v), Grouped.with(Serdes.String(), Serdes.String()))
                        : merged.groupByKey();
                boolean count = params.get("op").asText().equals("count");
                if (params.get("window").asText().equals("none")) {
                    tableToOut(count ? (KTable) grouped.count() : grouped.reduce(KafkaStreamsReference::lastThree));
                } else {
                    TimeWindowedKStream<String, String> windowed = grouped.windowedBy(timeWindows(params));
                    windowedToOut(count ? (KTable) windowed.count() : windowed.reduce(KafkaStreamsReference::lastThree));
                }
                return;
            }
            case "repartition_aggregation": {
                KStream<String, String> in = builder.stream("in", STRINGS);
                String rekey = params.get("rekey").asText();
                Grouped<String, String> strings = Grouped.with(Serdes.String(), Serdes.String());
                KGroupedStream<String, String> grouped = rekey.equals("group_by")
                        ? in.groupBy((k, v) -> group(v), strings)
                        : rekey.equals("select_key")
                        ? in.selectKey((k, v) -> group(v)).groupByKey(strings)
                        : in.map((k, v) -> KeyValue.pair(group(v), v == null ? null : (k == null ? "~" : k) + ":" + amount(v)))
                                .groupByKey(strings);
                String op = params.get("op").asText();
                if (!params.get("window").asText().equals("none")) {
                    windowedToOut((KTable) windowedAggregation(grouped, params, counterfactual));
                } else if (op.equals("count")) {
                    tableToOut(grouped.count());
                } else if (op.equals("reduce")) {
                    tableToOut(grouped.reduce((a, b) -> String.valueOf(amount(a) + amount(b))));
                } else {
                    tableToOut(grouped.aggregate(() -> 0L, (k, v, total) -> total + amount(v),
                            Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>with(Serdes.String(), Serdes.Long())));
                }
                return;
            }
            case "table_view": {
                KTable<String, String> table = builder.table("in", STRINGS);
                switch (params.get("view").asText()) {
                    case "filter":
                        table = table.filter((k, v) -> amount(v) >= 5);
                        break;
                    case "filter_not":
                        table = table.filterNot((k, v) -> amount(v) >= 5);
                        break;
                    case "map_values":
                        table = table.mapValues(KafkaStreamsReference::doubled);
                        break;
                    case "filter_map_values":
                        table = table.filter((k, v) -> amount(v) >= 5).mapValues(KafkaStreamsReference::doubled);
                        break;
                    default:
                        table = table.mapValues(KafkaStreamsReference::doubled).filter((k, v) -> amount(v) >= 10);
                }
                tableToOut(table);
                return;
            }
            case "table_suppress": {
                String source = params.get("source").asText();
                KTable table;
                if (source.equals("topic")) {
                    table = builder.table("in", STRINGS);
                } else if (source.equals("aggregation")) {
                    table = builder.stream("in", STRINGS).groupByKey().aggregate(() -> 0L,
                            (k, v, total) -> total + amount(v),
                            Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>with(Serdes.String(), Serdes.Long()));
                } else {
                    table = builder.table("in", STRINGS).groupBy((k, v) -> KeyValue.pair(group(v), v),
                            Grouped.with(Serdes.String(), Serdes.String())).aggregate(() -> 0L,
                            (k, v, total) -> total + amount(v), (k, v, total) -> total - amount(v),
                            Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>with(Serdes.String(), Serdes.Long()));
                }
                tableToOut(table.suppress(Suppressed.untilTimeLimit(millis(params, "limit"),
                        Suppressed.BufferConfig.unbounded())));
                return;
            }
            default:
                throw new IllegalArgumentException("unknown family " + family);
        }
    }

    // ---- running one request ----

    private static Properties config(Path stateDir) {
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, "streamkit-parity");
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "unused:9092");
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0L);
        props.put(StreamsConfig.DSL_STORE_SUPPLIERS_CLASS_CONFIG, BuiltInDslStoreSuppliers.InMemoryDslStoreSuppliers.class);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_OUTER_JOIN_SPURIOUS_RESULTS_FIX, 0L);
        // the final-result emit strategy's wall-clock throttle (the driver's clock never moves)
        props.put(StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_WINDOWED_AGGREGATION, 0L);
        return props;
    }

    private static ObjectNode handle(JsonNode request, Path stateRoot) {
        ObjectNode reply = MAPPER.createObjectNode();
        ArrayNode outputs = reply.putArray("outputs");
        Set<String> counterfactual = new HashSet<>();
        request.path("counterfactual").forEach(c -> counterfactual.add(c.asText()));
        Properties props = config(stateRoot.resolve("request-" + requestCount++));
        try {
            StreamsBuilder builder = new StreamsBuilder(new TopologyConfig(new StreamsConfig(props)));
            build(builder, request.get("family").asText(), request.get("params"), counterfactual);
            try (TopologyTestDriver driver = new TopologyTestDriver(builder.build(props), props, Instant.EPOCH)) {
                TestOutputTopic<String, String> out =
                        driver.createOutputTopic("out", new StringDeserializer(), new StringDeserializer());
                Map<String, TestInputTopic<String, String>> inputs = new HashMap<>();
                int cause = 0;
                Map<String, Set<String>> present = new HashMap<>(); // keys with a value, per topic
                boolean dropAbsentTombstones = counterfactual.contains("absent-tombstones-dropped");
                for (JsonNode record : request.get("records")) {
                    if (dropAbsentTombstones && !record.get(1).isNull()) {
                        Set<String> keys = present.computeIfAbsent(record.get(0).asText(), t -> new HashSet<>());
                        if (record.get(2).isNull() && !keys.remove(record.get(1).asText())) {
                            cause++; // as if the table source dropped it: nothing downstream sees it
                            continue;
                        }
                        if (!record.get(2).isNull()) {
                            keys.add(record.get(1).asText());
                        }
                    }
                    TestInputTopic<String, String> topic = inputs.computeIfAbsent(record.get(0).asText(),
                            name -> driver.createInputTopic(name, new StringSerializer(), new StringSerializer()));
                    topic.pipeInput(record.get(1).isNull() ? null : record.get(1).asText(),
                            record.get(2).isNull() ? null : record.get(2).asText(), record.get(3).asLong());
                    for (TestRecord<String, String> emitted : out.readRecordsToList()) {
                        ArrayNode row = outputs.addArray();
                        String key = emitted.key();
                        if (key != null && key.startsWith("[")) {
                            row.add(MAPPER.readTree(key));
                        } else {
                            row.add(key);
                        }
                        row.add(emitted.value()).add(emitted.timestamp()).add(cause);
                    }
                    cause++;
                }
            }
            reply.putNull("error");
        } catch (Throwable e) {
            reply.put("error", e.toString());
        }
        return reply;
    }

    public static void main(String[] args) throws Exception {
        Path stateRoot = Path.of(args[0]); // the caller's temporary folder, removed by the caller
        PrintStream replies = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        System.setOut(System.err); // whatever else prints must not corrupt the replies
        BufferedReader requests = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = requests.readLine(); line != null; line = requests.readLine()) {
            if (line.isBlank()) {
                continue;
            }
            replies.println(handle(MAPPER.readTree(line), stateRoot));
            replies.flush();
        }
    }
}
