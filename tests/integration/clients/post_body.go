// post_body.go - Go's net/http client sends one request body over and
// over, the way an ordinary client does. For test_payload_too_large.py.
//
//	post_body PORT METHOD PATH BODY_FILE ATTEMPTS
//
// One fresh connection per attempt (no keep-alive, no proxy), one after
// another; one JSON line per attempt on stdout: {"attempt", "status",
// "content_type", "www_authenticate", "body"} or {"attempt", "error"} when no
// answer was read.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"
)

type outcome struct {
	Attempt     int     `json:"attempt"`
	Status      int     `json:"status,omitempty"`
	ContentType *string `json:"content_type,omitempty"`
	WWWAuth     *string `json:"www_authenticate,omitempty"`
	Body        *string `json:"body,omitempty"`
	Error       string  `json:"error,omitempty"`
}

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: post_body PORT METHOD PATH BODY_FILE ATTEMPTS")
		os.Exit(2)
	}
	port, method, path := os.Args[1], os.Args[2], os.Args[3]
	body, err := os.ReadFile(os.Args[4])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	attempts, err := strconv.Atoi(os.Args[5])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	client := &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{DisableKeepAlives: true}, // Proxy nil: none
	}
	url := "http://127.0.0.1:" + port + path
	out := json.NewEncoder(os.Stdout)
	for i := 0; i < attempts; i++ {
		o := outcome{Attempt: i}
		req, err := http.NewRequest(method, url, bytes.NewReader(body))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			o.Error = err.Error()
		} else {
			data, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				o.Error = "reading the answer: " + err.Error()
			} else {
				ct, text := resp.Header.Get("Content-Type"), string(data)
				o.Status, o.ContentType, o.Body = resp.StatusCode, &ct, &text
				if wa := resp.Header.Get("WWW-Authenticate"); wa != "" {
					o.WWWAuth = &wa
				}
			}
		}
		if err := out.Encode(o); err != nil {
			os.Exit(1)
		}
	}
}
