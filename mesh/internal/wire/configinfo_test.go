package wire

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
		info := ConfigInfo{Membership: m, Founders: []quorum.NodeID{"a", "b", "c"}, Voting: "live"}
		b, err := Encode(KindConfigReply, info)
		if err != nil {
			t.Fatal(err)
		}
		old, err := DecodeConfigReply(b)
		if err != nil || !old.Equal(m) {
			t.Fatalf("an older node reads %+v, %v; want %+v", old, err, m)
		}
		got, err := DecodeConfigInfo(b)
		if err != nil || !got.Equal(m) || !slices.Equal(got.Founders, info.Founders) || got.Voting != "live" {
			t.Fatalf("decoded %+v, %v; want %+v", got, err, info)
		}
		b, err = Encode(KindConfigReply, &m) // an older node's answer
		if err != nil {
			t.Fatal(err)
		}
		got, err = DecodeConfigInfo(b)
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
		b, err := Encode(KindConfigReply, ConfigInfo{Membership: m, Founders: m.Voters, Voting: "catching-up"})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := DecodeConfigInfo(data)
		boundedAlloc(t, data, allocPerByteGo, func() { DecodeConfigInfo(data) })
		if err != nil {
			refused(t, err)
			return
		}
		checkDecodedMembership(t, data, &info.Membership)
		if len(info.Founders) > MaxVoters || len(info.Voting) > MaxVotingText {
			t.Fatalf("decoded over the limits: %+v", info)
		}
		b, err := Encode(KindConfigReply, info)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeConfigInfo(b)
		if err != nil {
			t.Fatalf("re-encoding gave an answer that is refused: %v\n%+v", err, info)
		}
		if b2, _ := Encode(KindConfigReply, again); !bytes.Equal(b, b2) {
			t.Fatalf("re-encoding changed the answer:\n%+v\n%+v", info, again)
		}
	})
}
