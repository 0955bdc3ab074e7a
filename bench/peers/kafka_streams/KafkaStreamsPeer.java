// Kafka Streams as a benchmark peer: the scenarios of bench/peers/workload.py as a Kafka Streams
// 4.1 user writes them (one stream thread, Kafka Streams' default RocksDB stores, exactly_once_v2
// for S5), timed the way bench/peers/probe.py times every framework.
//
// usage: java -cp ... KafkaStreamsPeer SPEC_JSON   (the spec of bench/peers/child.py)
// stdout, last line: {"seconds", "startup_seconds", "cpu_seconds", "records", "peak_rss_mib"}
//
// The timed window starts when the main consumer first hands out records of the source topic
// (a consumer interceptor sees them) and ends once the group's committed offsets (read with
// require_stable, so a transaction's offsets count only once committed) cover every input
// record: consume, process, produce and commit of all N events. Offsets are polled every 20 ms
// by an admin client, which can add up to that much to the window. CPU is the JVM's process
// CPU time over the same window (its JIT and GC threads included).
//
// As the Python frameworks stop gracefully with a final commit once every input record is in
// hand (probe.on_all_fetched), Kafka Streams asks for a commit once its source has passed on
// the last input record: a pass-through node after the source counts the records and calls
// ProcessorContext.commit() from then on, so the window does not wait for the commit interval.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerInterceptor;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;

public final class KafkaStreamsPeer {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final long WINDOW_MS = 60_000;  // bench/peers/workload.py WINDOW_MS and GRACE_MS
    private static final long GRACE_MS = 10_000;
    private static final long POLL_OFFSETS_MS = 20;
    private static final long IDLE_STOP_MS = 120_000;

    // set by the consumer interceptor (its instance is made by the consumer, not by us)
    static volatile String sourceTopic;
    static final AtomicLong handedOut = new AtomicLong();
    static volatile long firstInputNanos = -1;
    static volatile long firstInputCpuNanos = -1;
    static volatile long firstInputWallMillis = -1;

    private KafkaStreamsPeer() {
    }

    /** Counts the source topic's records the main consumer hands out; stamps the first. */
    public static final class HandedOut implements ConsumerInterceptor<byte[], byte[]> {
        @Override
        public ConsumerRecords<byte[], byte[]> onConsume(ConsumerRecords<byte[], byte[]> records) {
            int n = 0;
            for (TopicPartition tp : records.partitions()) {
                if (tp.topic().equals(sourceTopic)) {
                    n += records.records(tp).size();
                }
            }
            if (n > 0) {
                if (firstInputNanos < 0) {
                    firstInputNanos = System.nanoTime();
                    firstInputCpuNanos = processCpuNanos();
                    firstInputWallMillis = System.currentTimeMillis();
                }
                handedOut.addAndGet(n);
            }
            return records;
        }

        @Override
        public void onCommit(Map<TopicPartition, OffsetAndMetadata> offsets) {
        }

        @Override
        public void close() {
        }

        @Override
        public void configure(Map<String, ?> configs) {
        }
    }

    static long processCpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
            .getProcessCpuTime();
    }

    static volatile long expectedRecords = Long.MAX_VALUE;
    static final AtomicLong passedOn = new AtomicLong();

    /** Passes every source record on; once all input records passed, asks for a commit after each. */
    static final class CommitWhenAllPassed<K, V> implements FixedKeyProcessor<K, V, V> {
        private FixedKeyProcessorContext<K, V> context;

        @Override
        public void init(FixedKeyProcessorContext<K, V> context) {
            this.context = context;
        }

        @Override
        public void process(FixedKeyRecord<K, V> record) {
            context.forward(record);
            if (passedOn.incrementAndGet() >= expectedRecords) {
                context.commit();
            }
        }
    }

    static double peakRssMib() throws IOException {
        for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
            if (line.startsWith("VmHWM:")) {
                return Long.parseLong(line.replaceAll("[^0-9]", "")) / 1024.0;
            }
        }
        throw new IOException("no VmHWM in /proc/self/status");
    }

    static String filterMap(String value) {
        try {
            JsonNode event = JSON.readTree(value);
            int amount = event.get("amount").asInt();
            if (amount <= 10) {
                return null;
            }
            ObjectNode out = JSON.createObjectNode();
            out.set("user", event.get("user"));
            out.set("page", event.get("page"));
            out.set("ts", event.get("ts"));
            out.put("cents", amount * 100);
            return JSON.writeValueAsString(out);
        } catch (IOException e) {
            throw new IllegalArgumentException("not a JSON event: " + value, e);
        }
    }

    static String enrich(String value, String row) {
        try {
            ObjectNode event = (ObjectNode) JSON.readTree(value);
            JsonNode page = JSON.readTree(row);
            event.set("title", page.get("title"));
            event.set("category", page.get("category"));
            return JSON.writeValueAsString(event);
        } catch (IOException e) {
            throw new IllegalArgumentException("not JSON: " + value + " / " + row, e);
        }
    }

    static String windowUpdate(long start, long count) {
        return "{\"start\":" + start + ",\"count\":" + count + "}";
    }

    static void build(StreamsBuilder builder, JsonNode spec) {
        String scenario = spec.get("scenario").asText();
        String sink = spec.get("sink").asText();
        if (scenario.equals("S0")) {
            builder.stream(sourceTopic, Consumed.with(Serdes.Bytes(), Serdes.Bytes()))
                .processValues(CommitWhenAllPassed::new)
                .to(sink, Produced.with(Serdes.Bytes(), Serdes.Bytes()));
            return;
        }
        KStream<Bytes, String> events = builder.stream(sourceTopic, Consumed.with(Serdes.Bytes(), Serdes.String()))
            .processValues(CommitWhenAllPassed::new);
        Produced<Bytes, String> out = Produced.with(Serdes.Bytes(), Serdes.String());
        switch (scenario) {
            case "S1" -> events.mapValues(KafkaStreamsPeer::filterMap).filter((k, v) -> v != null).to(sink, out);
            case "S2", "S5" -> events.groupByKey()
                .count(Materialized.as("counts"))
                .toStream()
                .mapValues(count -> Long.toString(count))
                .to(sink, out);
            case "S3" -> events.groupByKey()
                .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(WINDOW_MS), Duration.ofMillis(GRACE_MS)))
                .count(Materialized.as("window-counts"))
                .toStream()
                .map((window, count) -> KeyValue.pair(window.key(), windowUpdate(window.window().start(), count)))
                .to(sink, out);
            case "S4" -> {
                KTable<Bytes, String> pages = builder.table(spec.get("table").asText(),
                    Consumed.with(Serdes.Bytes(), Serdes.String()), Materialized.as("pages"));
                events.join(pages, KafkaStreamsPeer::enrich).to(sink, out);
            }
            default -> throw new IllegalArgumentException("unknown scenario " + scenario);
        }
    }

    static Properties config(JsonNode spec) {
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, spec.get("app_id").asText());
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, spec.get("bootstrap").asText());
        props.put(StreamsConfig.STATE_DIR_CONFIG, spec.get("state_dir").asText() + "/kafka-streams");
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, (long) (spec.get("commit_interval_s").asDouble() * 1000));
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG,
            spec.get("scenario").asText().equals("S5") ? StreamsConfig.EXACTLY_ONCE_V2 : StreamsConfig.AT_LEAST_ONCE);
        // caching off: one output per input update, the peers' work (bench/peers/workload.py);
        // on: Kafka Streams' default 10 MiB record cache
        if (!spec.path("caching").asBoolean(false)) {
            props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0L);
        }
        props.put(StreamsConfig.mainConsumerPrefix(ConsumerConfig.INTERCEPTOR_CLASSES_CONFIG), HandedOut.class.getName());
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG),
            Integer.parseInt(System.getenv().getOrDefault("STREAMKIT_KAFKA_SESSION_TIMEOUT_MS", "6000")));
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG),
            Integer.parseInt(System.getenv().getOrDefault("STREAMKIT_KAFKA_HEARTBEAT_INTERVAL_MS", "1000")));
        // linger 5 ms as every framework here (Kafka Streams' own default for its producer is 100 ms,
        // which a latency run would measure; a full batch is sent at once either way)
        props.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), 5);
        if (spec.hasNonNull("fetch_max_wait_ms")) {
            props.put(StreamsConfig.consumerPrefix(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG),
                spec.get("fetch_max_wait_ms").asInt());
        }
        return props;
    }

    /** The group's committed offsets on the source topic, summed (transactional ones once committed). */
    static long committed(Admin admin, String group) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> offsets = admin
            .listConsumerGroupOffsets(group, new ListConsumerGroupOffsetsOptions().requireStable(true))
            .partitionsToOffsetAndMetadata().get();
        long total = 0;
        for (Map.Entry<TopicPartition, OffsetAndMetadata> entry : offsets.entrySet()) {
            if (entry.getKey().topic().equals(sourceTopic) && entry.getValue() != null) {
                total += entry.getValue().offset();
            }
        }
        return total;
    }

    public static void main(String[] args) throws Exception {
        long processStarted = ManagementFactory.getRuntimeMXBean().getStartTime();
        JsonNode spec = JSON.readTree(args[0]);
        sourceTopic = spec.get("source").asText();
        long expected = spec.get("events").asLong();
        expectedRecords = expected;
        String group = spec.get("app_id").asText();

        StreamsBuilder builder = new StreamsBuilder();
        build(builder, spec);
        Properties adminConfig = new Properties();
        adminConfig.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, spec.get("bootstrap").asText());
        long doneNanos;
        long doneCpuNanos;
        try (KafkaStreams streams = new KafkaStreams(builder.build(), config(spec));
             Admin admin = Admin.create(adminConfig)) {
            streams.setUncaughtExceptionHandler(e -> {
                e.printStackTrace();
                return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse
                    .SHUTDOWN_CLIENT;
            });
            streams.start();
            long lastProgress = System.nanoTime();
            long lastHandedOut = 0;
            while (true) {
                if (streams.state() == KafkaStreams.State.ERROR || streams.state() == KafkaStreams.State.NOT_RUNNING) {
                    throw new IllegalStateException("Kafka Streams stopped (" + streams.state() + ") after handing out "
                        + handedOut.get() + " of " + expected + " records");
                }
                if (handedOut.get() >= expected && committed(admin, group) >= expected) {
                    doneNanos = System.nanoTime();
                    doneCpuNanos = processCpuNanos();
                    break;
                }
                if (handedOut.get() != lastHandedOut) {
                    lastHandedOut = handedOut.get();
                    lastProgress = System.nanoTime();
                } else if (System.nanoTime() - lastProgress > IDLE_STOP_MS * 1_000_000) {
                    throw new IllegalStateException("no input record handed out for " + IDLE_STOP_MS / 1000
                        + " s: " + handedOut.get() + " of " + expected);
                }
                Thread.sleep(POLL_OFFSETS_MS);
            }
            streams.close(Duration.ofSeconds(60));
        }
        double startupSeconds = (firstInputWallMillis - processStarted) / 1e3;
        ObjectNode figures = JSON.createObjectNode();
        figures.put("seconds", (doneNanos - firstInputNanos) / 1e9);
        figures.put("startup_seconds", startupSeconds);
        figures.put("cpu_seconds", (doneCpuNanos - firstInputCpuNanos) / 1e9);
        figures.put("records", handedOut.get());
        figures.put("peak_rss_mib", peakRssMib());
        System.out.println(JSON.writeValueAsString(figures));
        System.out.flush();
        System.exit(0);
    }
}
