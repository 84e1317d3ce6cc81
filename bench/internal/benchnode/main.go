// Command benchnode is one lockmesh node for the bench program's "separate
// OS processes" row: mesh.DefaultLocalConfig on loopback with free ports,
// driven by the line protocol of package nodecmd on stdin and stdout.
//
// examples/node does not fit that row: it runs one command at a time, so
// 64 goroutines cannot take locks at once, and timing through its
// terminal protocol would add a pipe round trip to every operation.
//
//	go build -o /tmp/benchnode ./bench/internal/benchnode
//	/tmp/benchnode -name v1 -voters v1,v2,v3
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/lockmesh/lockmesh/bench/internal/nodecmd"
	"github.com/lockmesh/lockmesh/mesh"
)

func main() {
	name := flag.String("name", "", "node name")
	voters := flag.String("voters", "", "comma list of voter names")
	seeds := flag.String("seeds", "", "comma list of gossip addresses to join")
	flag.Parse()
	cfg := mesh.DefaultLocalConfig()
	cfg.Name = *name
	cfg.Voters = strings.Split(*voters, ",")
	if *seeds != "" {
		cfg.Seeds = strings.Split(*seeds, ",")
	}
	m, err := mesh.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchnode:", err)
		os.Exit(1)
	}
	// quit stops the node like a crash (no release): the bench ends it.
	nodecmd.Serve(context.Background(), m, len(cfg.Voters), os.Stdin, os.Stdout)
	m.Shutdown()
}
