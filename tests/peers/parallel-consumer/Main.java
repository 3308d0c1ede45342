// A benchmark peer on Confluent's Parallel Consumer: it joins a fresh
// consumer group, reads a topic from its start through a
// ParallelStreamProcessor in KEY order, sleeps for every record (a stand-in
// for I/O), and checks that no key was ever processed out of order or twice
// at once. When it has processed the number of distinct records it was given
// it closes the processor and prints one line to stdout:
//
//   read=N distinct=D wall_s=S steady_s=T order_violations=V
//
// read counts every call of the user function (redeliveries included),
// distinct the distinct (partition, offset) pairs among them; wall_s runs
// from the start of main (JVM start-up and the in-memory compile of this
// file are not in it) to the end of the last record, steady_s from the start
// of the first record to the end of the last. Logs go to stderr only.
//
// Run as a single source file, no build step:
//   java -cp 'DIR/*' Main.java BOOTSTRAP TOPIC GROUP TOTAL_MESSAGES SLEEP_MS MAX_CONCURRENCY

import io.confluent.parallelconsumer.ParallelConsumerOptions;
import io.confluent.parallelconsumer.ParallelConsumerOptions.CommitMode;
import io.confluent.parallelconsumer.ParallelConsumerOptions.ProcessingOrder;
import io.confluent.parallelconsumer.ParallelStreamProcessor;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;

import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

public class Main {
    /** How long to wait for a record (the first one included) before giving up. */
    static final long IDLE_LIMIT_NANOS = TimeUnit.SECONDS.toNanos(60);

    static void fail(String message) {
        System.err.println("parallel-consumer-peer: " + message);
        System.err.flush();
        // halt, not exit: the processor's threads must not hold the exit up.
        Runtime.getRuntime().halt(1);
    }

    public static void main(String[] args) throws Exception {
        final long started = System.nanoTime();
        // Before any logger exists: slf4j-simple writes to stderr, and only
        // warnings and errors.
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");

        if (args.length != 6) {
            fail("usage: Main BOOTSTRAP TOPIC GROUP TOTAL_MESSAGES SLEEP_MS MAX_CONCURRENCY");
        }
        final String bootstrap = args[0];
        final String topic = args[1];
        final String group = args[2];
        final long total = Long.parseLong(args[3]);
        final long sleepMs = Long.parseLong(args[4]);
        final int maxConcurrency = Integer.parseInt(args[5]);
        if (total <= 0 || sleepMs < 0 || maxConcurrency <= 0) {
            fail("TOTAL_MESSAGES and MAX_CONCURRENCY must be positive, SLEEP_MS not negative");
        }

        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        // Parallel Consumer commits itself and refuses a consumer that
        // auto-commits.
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        KafkaConsumer<String, byte[]> consumer = new KafkaConsumer<>(props);

        ParallelConsumerOptions<String, byte[]> options = ParallelConsumerOptions.<String, byte[]>builder()
                .consumer(consumer)
                // Records of one key one at a time and in offset order,
                // records of different keys in parallel.
                .ordering(ProcessingOrder.KEY)
                .maxConcurrency(maxConcurrency)
                // The library's default, and its fastest mode: completed
                // offsets (with the incomplete ones above them encoded in the
                // commit metadata) are committed with commitAsync every
                // commitInterval (5 s by default) and once more on close.
                .commitMode(CommitMode.PERIODIC_CONSUMER_ASYNCHRONOUS)
                .build();
        ParallelStreamProcessor<String, byte[]> processor =
                ParallelStreamProcessor.createEosStreamProcessor(options);
        processor.subscribe(List.of(topic));

        final AtomicLong read = new AtomicLong();
        final AtomicLong violations = new AtomicLong();
        final AtomicLong firstStart = new AtomicLong(Long.MIN_VALUE);
        final AtomicLong lastEnd = new AtomicLong(Long.MIN_VALUE);
        final AtomicLong lastArrival = new AtomicLong(started);
        // (partition, offset) pairs processed, and per (partition, key) the
        // highest offset completed and the offset in progress.
        final Set<Long> distinct = ConcurrentHashMap.newKeySet();
        final ConcurrentHashMap<String, Long> lastDone = new ConcurrentHashMap<>();
        final ConcurrentHashMap<String, Long> inProgress = new ConcurrentHashMap<>();
        final CountDownLatch done = new CountDownLatch(1);

        processor.poll(context -> {
            for (ConsumerRecord<String, byte[]> record : context.getConsumerRecordsFlattened()) {
                long begin = System.nanoTime();
                lastArrival.set(begin);
                firstStart.compareAndSet(Long.MIN_VALUE, begin);
                read.incrementAndGet();
                String key = record.partition() + "/" + record.key();
                long offset = record.offset();

                if (inProgress.putIfAbsent(key, offset) != null) {
                    violations.incrementAndGet();
                }
                Long last = lastDone.get(key);
                if (last != null && offset < last) {
                    violations.incrementAndGet();
                }
                if (sleepMs > 0) {
                    try {
                        Thread.sleep(sleepMs);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        throw new RuntimeException("interrupted", e);
                    }
                }
                lastDone.merge(key, offset, Math::max);
                inProgress.remove(key, offset);

                long end = System.nanoTime();
                lastEnd.accumulateAndGet(end, Math::max);
                lastArrival.set(end);
                distinct.add(((long) record.partition() << 40) | offset);
                if (distinct.size() >= total) {
                    done.countDown();
                }
            }
        });

        while (!done.await(1, TimeUnit.SECONDS)) {
            if (processor.isClosedOrFailed()) {
                fail("the processor stopped after " + distinct.size() + " of " + total + " records");
            }
            if (System.nanoTime() - lastArrival.get() > IDLE_LIMIT_NANOS) {
                fail("no record for 60 s; processed " + distinct.size() + " of " + total);
            }
        }
        long last = lastEnd.get();

        // close() is closeDontDrainFirst: records already fetched but not
        // yet started are dropped, the work in flight is waited for, and the
        // completed offsets are committed once more before the consumer
        // leaves the group.
        long closing = System.nanoTime();
        processor.closeDontDrainFirst(Duration.ofSeconds(30));
        System.err.printf("parallel-consumer-peer: closed in %.3f s%n", (System.nanoTime() - closing) / 1e9);

        System.out.printf("read=%d distinct=%d wall_s=%.3f steady_s=%.3f order_violations=%d%n",
                read.get(),
                distinct.size(),
                (last - started) / 1e9,
                (last - firstStart.get()) / 1e9,
                violations.get());
        System.out.flush();
        System.exit(0);
    }
}
