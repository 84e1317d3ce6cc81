//go:build linux

package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"testing"

	"github.com/lockmesh/lockmesh/lease"
)

// The test binary doubles as a CMD for lock: with helperEnv set, TestMain
// runs runHelper instead of the tests.
const (
	helperEnv = "LOCKMESH_TEST_HELPER"
	fenceEnv  = "LOCKMESH_TEST_FENCE"
)

// runHelper runs the helper named h and returns its exit status.
//
// "longpolls" opens many long-polls at once (attack_http_test.go).
//
// "fence" is a writer to a fenced resource: it prints "ready pid=P
// token=T", then for every line on stdin writes to the fence at
// $LOCKMESH_TEST_FENCE with its $LOCKMESH_TOKEN and prints "admitted T" or
// "refused T"; it exits 0 at the end of stdin.
func runHelper(h string) int {
	switch h {
	case "longpolls":
		return runLongPolls()
	case "fence":
	default:
		fmt.Fprintf(os.Stderr, "unknown helper %q\n", h)
		return 2
	}
	key, token := os.Getenv("LOCKMESH_KEY"), os.Getenv("LOCKMESH_TOKEN")
	fmt.Printf("ready pid=%d token=%s\n", os.Getpid(), token)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		u := os.Getenv(fenceEnv) + "?" + url.Values{"key": {key}, "token": {token}}.Encode()
		resp, err := http.Post(u, "text/plain", nil)
		if err != nil {
			fmt.Fprintf(os.Stderr, "fence: %v\n", err)
			return 1
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		verdict := "admitted"
		if resp.StatusCode != http.StatusOK {
			verdict = "refused"
		}
		fmt.Printf("%s %s\n", verdict, token)
	}
	return 0
}

// fenceServer is a resource that keeps the highest token it has seen per
// key and refuses lower ones (lease.Fence), over HTTP.
func fenceServer(t *testing.T) string {
	f := lease.NewFence()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, err := strconv.ParseUint(r.URL.Query().Get("token"), 10, 64)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := f.Admit(r.URL.Query().Get("key"), token); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// helperCmd is the argv and environment that run the fence helper as CMD.
func helperCmd(t *testing.T, fence string) []string {
	t.Setenv(helperEnv, "fence")
	t.Setenv(fenceEnv, fence)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{exe}
}
