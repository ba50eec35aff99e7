// Command driver is the Go driver of the clients scenario (issue 26;
// tests/bench/clients.py runs it; tests/bench/run.sh builds it). Why it
// exists: the jobs/s and client CPU of scheduling through the Go client
// module (clients/go) have to be measured in a Go process of their own,
// against the same jobs sent one request each with net/http.
//
//	driver --mode lib|plain --url http://127.0.0.1:P --callers C
//	       --jobs N --seconds S --delay-ms D
//
// mode lib:   Client.Schedule from C goroutines (batched into POST
// /schedule/batch), the client's defaults (linger 0, its own keep-alive
// transport); mode plain: POST /schedule per job through net/http, a
// transport keeping C idle connections, no extra headers.
//
// Each of the C goroutines schedules one job at a time until N jobs were
// started or S seconds passed. Before the clock each goroutine schedules
// one job (connections open), then "READY" on stdout; the clock starts at a
// line on stdin; at the end one line "RESULT {json}": jobs, seconds, cpu_us
// (syscall.Getrusage of this process, user + system, over the measured
// window only), errors.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rmqs "github.com/rmq-scheduler/rmq-scheduler/clients/go"
)

func cpuMicros() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano()/1000 + ru.Stime.Nano()/1000
}

// body is the same small JSON body for every way.
func body(i int64) map[string]any {
	return map[string]any{"order": i, "customer": fmt.Sprintf("c-%d", i%1000)}
}

func main() {
	mode := flag.String("mode", "", "lib or plain")
	url := flag.String("url", "http://127.0.0.1:8080", "the service")
	callers := flag.Int("callers", 1, "concurrent callers")
	jobs := flag.Int64("jobs", 2000, "jobs at most")
	seconds := flag.Float64("seconds", 10, "seconds at most")
	delayMs := flag.Int64("delay-ms", 3600000, "delay of every job")
	flag.Parse()
	ctx := context.Background()

	var one func(i int64) error
	var closeFn func()
	switch *mode {
	case "lib":
		c, err := rmqs.New(*url)
		if err != nil {
			fmt.Fprintln(os.Stderr, "driver:", err)
			os.Exit(2)
		}
		one = func(i int64) error {
			_, err := c.Schedule(ctx, rmqs.Job{Exchange: "bench-clients", RoutingKey: "order.reminder",
				Body: body(i), Delay: time.Duration(*delayMs) * time.Millisecond})
			return err
		}
		closeFn = func() { c.Close() }
	case "plain":
		tr := &http.Transport{MaxIdleConns: *callers, MaxIdleConnsPerHost: *callers}
		hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
		one = func(i int64) error {
			b, _ := json.Marshal(map[string]any{"exchange": "bench-clients", "routing_key": "order.reminder",
				"body": body(i), "delay_ms": *delayMs})
			resp, err := hc.Post(*url+"/schedule", "application/json", bytes.NewReader(b))
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusCreated {
				return fmt.Errorf("POST /schedule: %d %.200s", resp.StatusCode, raw)
			}
			var out struct {
				ID string `json:"id"`
			}
			return json.Unmarshal(raw, &out)
		}
		closeFn = tr.CloseIdleConnections
	default:
		fmt.Fprintln(os.Stderr, "driver: --mode lib or plain")
		os.Exit(2)
	}

	var next, done, errs int64
	var firstErr atomic.Value
	var warm, finished sync.WaitGroup
	start := make(chan struct{})
	var deadline time.Time
	warmFailed := int64(0)
	for k := 0; k < *callers; k++ {
		warm.Add(1)
		finished.Add(1)
		go func(k int) {
			defer finished.Done()
			if err := one(int64(-1 - k)); err != nil { // warm-up: a connection open
				atomic.AddInt64(&warmFailed, 1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
			warm.Done()
			<-start
			for {
				i := atomic.AddInt64(&next, 1) - 1
				if i >= *jobs || time.Now().After(deadline) {
					return
				}
				if err := one(i); err != nil {
					atomic.AddInt64(&errs, 1)
					firstErr.CompareAndSwap(nil, err.Error())
				} else {
					atomic.AddInt64(&done, 1)
				}
			}
		}(k)
	}
	warm.Wait()
	if warmFailed > 0 {
		fmt.Fprintln(os.Stderr, "driver: warm-up failed:", firstErr.Load())
		os.Exit(1)
	}
	fmt.Println("READY")
	bufio.NewReader(os.Stdin).ReadString('\n')
	c0, t0 := cpuMicros(), time.Now()
	deadline = t0.Add(time.Duration(*seconds * float64(time.Second)))
	close(start)
	finished.Wait()
	secs, cpu := time.Since(t0).Seconds(), cpuMicros()-c0
	fe, _ := firstErr.Load().(string)
	if len(fe) > 300 {
		fe = fe[:300]
	}
	res, _ := json.Marshal(map[string]any{"jobs": done, "seconds": secs, "cpu_us": cpu,
		"errors": errs, "first_error": fe})
	fmt.Printf("RESULT %s\n", res)
	closeFn()
}
