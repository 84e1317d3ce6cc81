package mesh

import (
	"bytes"
	"slices"
	"testing"

	"github.com/lockmesh/lockmesh/quorum"
)

// TestConfigInfoBothWays: the answer to a configuration fetch grew the
// founding voters and the voting state; a node that reads only the
// configuration (an older one) still reads it, and a newer node reads an
// older node's answer, without them.
func TestConfigInfoBothWays(t *testing.T) {
	for _, m := range sampleMemberships() {
		info := configInfo{Membership: m, Founders: []quorum.NodeID{"a", "b", "c"}, Voting: Live.String()}
		b, err := encode(kindConfigReply, info)
		if err != nil {
			t.Fatal(err)
		}
		old, err := fuzzLimits.decodeConfigReply(b)
		if err != nil || !old.Equal(m) {
			t.Fatalf("an older node reads %+v, %v; want %+v", old, err, m)
		}
		got, err := decodeConfigInfo(b)
		if err != nil || !got.Equal(m) || !slices.Equal(got.Founders, info.Founders) || got.Voting != "live" {
			t.Fatalf("decoded %+v, %v; want %+v", got, err, info)
		}
		b, err = encode(kindConfigReply, &m) // an older node's answer
		if err != nil {
			t.Fatal(err)
		}
		got, err = decodeConfigInfo(b)
		if err != nil || !got.Equal(m) || got.Founders != nil || got.Voting != "" {
			t.Fatalf("an older node's answer: %+v, %v", got, err)
		}
	}
}

// FuzzDecodeConfigInfo: the answer to a configuration fetch, as readiness
// probes and the other-mesh diagnostic read it, is bounded and checked
// like the configuration alone.
func FuzzDecodeConfigInfo(f *testing.F) {
	for _, m := range sampleMemberships() {
		b, err := encode(kindConfigReply, configInfo{Membership: m, Founders: m.Voters, Voting: "catching-up"})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := decodeConfigInfo(data)
		boundedAlloc(t, data, allocPerByteGo, func() { decodeConfigInfo(data) })
		if err != nil {
			refused(t, err)
			return
		}
		checkDecodedMembership(t, data, &info.Membership)
		if len(info.Founders) > maxVoters || len(info.Voting) > 32 {
			t.Fatalf("decoded over the limits: %+v", info)
		}
		b, err := encode(kindConfigReply, info)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeConfigInfo(b)
		if err != nil {
			t.Fatalf("re-encoding gave an answer that is refused: %v\n%+v", err, info)
		}
		if b2, _ := encode(kindConfigReply, again); !bytes.Equal(b, b2) {
			t.Fatalf("re-encoding changed the answer:\n%+v\n%+v", info, again)
		}
	})
}
