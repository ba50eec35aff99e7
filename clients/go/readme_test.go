package rmqs_test

// The README's quick start, run as written against the real service: only
// the service's URL (this test's port) is replaced, and the program is
// built against this checkout's module (a go.mod replace, no network), so
// the documented example cannot drift from the library.

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestReadmeQuickStart(t *testing.T) {
	md, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)## Quick start.*?```go\n(.*?)```").FindSubmatch(md)
	if m == nil {
		t.Fatal(`README.md has no go block under "## Quick start"`)
	}
	code := string(m[1])
	const url = `"http://127.0.0.1:8080"`
	if !strings.Contains(code, url) {
		t.Fatalf("the quick start does not use %s", url)
	}
	svc := startService(t, "")
	dir := t.TempDir()
	code = strings.Replace(code, url, strconv.Quote(svc.url()), 1)
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	const mod = "github.com/rmq-scheduler/rmq-scheduler/clients/go"
	gomod := "module quickstart\n\ngo 1.19\n\nrequire " + mod + " v0.0.0\n\nreplace " + mod + " => " + here + "\n"
	for name, text := range map[string]string{"main.go": code, "go.mod": gomod} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "run", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "RMQS_API_TOKEN=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go run: %v\n%s", err, out)
	}
	// What its comments say it prints (log writes to stderr).
	if !regexp.MustCompile(`(?m) pending \d{4}-`).Match(out) ||
		!regexp.MustCompile(`(?m) delay_ms .*must not be negative`).Match(out) {
		t.Fatalf("unexpected output:\n%s", out)
	}
}
