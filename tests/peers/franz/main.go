// Command franz-peer is bench_throughput's `--peer franz`: a consumer
// built on franz-go's kgo that joins a fresh consumer group, reads a topic
// from its start until it has read the number of records it was given,
// commits, and leaves the group. It prints its own wall and CPU time,
// over the whole run (join and leave included) and over the steady
// read (from the first record to the last):
//
//	read=N whole_wall_s=… whole_cpu_s=… steady_wall_s=… steady_cpu_s=…
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// cpu is the CPU time this process has used so far, user and system.
func cpu() time.Duration {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		fail("getrusage: %v", err)
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "franz-peer: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	brokers := flag.String("brokers", "", "the bootstrap brokers, comma-separated")
	topic := flag.String("topic", "", "the topic to read")
	group := flag.String("group", "", "a consumer group of its own")
	messages := flag.Int64("messages", 0, "the records to read")
	timeout := flag.Duration("timeout", 120*time.Second, "how long to try before giving up")
	flag.Parse()
	if *brokers == "" || *topic == "" || *group == "" || *messages <= 0 {
		fail("--brokers, --topic, --group and --messages are needed")
	}

	started, startedCPU := time.Now(), cpu()
	client, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(*brokers, ",")...),
		kgo.ConsumerGroup(*group),
		kgo.ConsumeTopics(*topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Committed once, at the end, as the other readers of the
		// benchmark do.
		kgo.DisableAutoCommit(),
	)
	if err != nil {
		fail("client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	var read int64
	var first time.Time
	var firstCPU time.Duration
	for read < *messages {
		fetches := client.PollFetches(ctx)
		for _, fetchErr := range fetches.Errors() {
			if errors.Is(fetchErr.Err, context.DeadlineExceeded) {
				fail("read %d of %d records in %v", read, *messages, *timeout)
			}
			fail("fetching %s/%d: %v", fetchErr.Topic, fetchErr.Partition, fetchErr.Err)
		}
		if first.IsZero() && !fetches.Empty() {
			first, firstCPU = time.Now(), cpu()
		}
		// Every record is looked at, as an application does.
		fetches.EachRecord(func(*kgo.Record) { read++ })
	}
	steady, steadyCPU := time.Since(first), cpu()-firstCPU
	if err := client.CommitUncommittedOffsets(ctx); err != nil {
		fail("commit: %v", err)
	}
	client.Close()
	fmt.Printf(
		"read=%d whole_wall_s=%.3f whole_cpu_s=%.3f steady_wall_s=%.3f steady_cpu_s=%.3f\n",
		read,
		time.Since(started).Seconds(),
		(cpu() - startedCPU).Seconds(),
		steady.Seconds(),
		steadyCPU.Seconds(),
	)
}
