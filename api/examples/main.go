// Command main schedules a job, reads its status and cancels it: rmq-scheduler
// from Go's standard library (net/http, encoding/json).
//
// The HTTP calls themselves, for reading or porting to a language without
// a library. From a Go program, use the module in clients/go instead:
// batching, safe retries and typed errors over these same calls.
//
//	go run api/examples/main.go [BASE_URL]     default http://127.0.0.1:8080
//	RMQS_API_TOKEN=... go run api/examples/main.go
//
// It prints one line per step and exits non-zero on any unexpected answer:
//
//	scheduled id=<id> status=pending deliver_at=<time>
//	read id=<id> status=pending
//	cancelled id=<id> status=cancelled
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// Job is the part of the API's Job object this example reads.
type Job struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	DeliverAt string `json:"deliver_at"`
}

type client struct {
	base  string
	token string
	http  *http.Client
}

// call sends one request and decodes the answer into out if its status is want.
func (c *client) call(want int, method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != want {
		return fmt.Errorf("%s %s: HTTP %d: %s", method, path, res.StatusCode, raw)
	}
	return json.Unmarshal(raw, out)
}

func run(c *client) error {
	// 1. Cancel order 1234 in 10 minutes unless it is paid by then.
	var job Job
	err := c.call(http.StatusCreated, "POST", "/schedule", map[string]any{
		"exchange":    "",
		"routing_key": "orders.expire",
		"body":        map[string]any{"order": 1234},
		"delay_ms":    600000,
		"headers":     map[string]any{"tenant": "acme"},
	}, &job)
	if err != nil {
		return err
	}
	if job.ID == "" || job.Status != "pending" {
		return fmt.Errorf("POST /schedule: unexpected job %+v", job)
	}
	fmt.Printf("scheduled id=%s status=%s deliver_at=%s\n", job.ID, job.Status, job.DeliverAt)

	// 2. Read it back.
	var again Job
	if err := c.call(http.StatusOK, "GET", "/jobs/"+job.ID, nil, &again); err != nil {
		return err
	}
	if again.ID != job.ID {
		return fmt.Errorf("GET /jobs/%s: unexpected job %+v", job.ID, again)
	}
	fmt.Printf("read id=%s status=%s\n", again.ID, again.Status)

	// 3. The order was paid: cancel the job.
	var done Job
	if err := c.call(http.StatusOK, "DELETE", "/jobs/"+job.ID, nil, &done); err != nil {
		return err
	}
	if done.Status != "cancelled" {
		return fmt.Errorf("DELETE /jobs/%s: unexpected job %+v", job.ID, done)
	}
	fmt.Printf("cancelled id=%s status=%s\n", done.ID, done.Status)
	return nil
}

func main() {
	base := "http://127.0.0.1:8080"
	if len(os.Args) > 1 {
		base = os.Args[1]
	}
	c := &client{
		base:  strings.TrimRight(base, "/"),
		token: os.Getenv("RMQS_API_TOKEN"),
		http:  &http.Client{Timeout: 10 * time.Second},
	}
	if err := run(c); err != nil {
		fmt.Fprintf(os.Stderr, "main.go: %v\n", err)
		os.Exit(1)
	}
}
