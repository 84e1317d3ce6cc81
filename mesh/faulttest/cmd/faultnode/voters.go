package main

import (
	"context"

	"github.com/lockmesh/lockmesh/mesh"
	"github.com/lockmesh/lockmesh/mesh/faulttest/internal/control"
)

// addVoter runs Mesh.AddVoter through this node. The reply's At is when
// the change returned, and Config the configuration this node knows then.
func (s *server) addVoter(ctx context.Context, name string) control.Reply {
	return s.changed(s.m.AddVoter(ctx, name))
}

// removeVoter runs Mesh.RemoveVoter through this node; the reply as for
// addVoter.
func (s *server) removeVoter(ctx context.Context, name string) control.Reply {
	return s.changed(s.m.RemoveVoter(ctx, name))
}

func (s *server) changed(err error) control.Reply {
	at := control.Now()
	r := s.voters()
	if err != nil {
		f := failed(err)
		r.Err, r.Msg = f.Err, f.Msg
	}
	r.At = at
	return r
}

// voters answers with the configuration this node knows (Mesh.Voters).
func (s *server) voters() control.Reply {
	c, err := s.m.Voters()
	if err != nil {
		return failed(err)
	}
	return control.Reply{Config: configuration(c), At: control.Now()}
}

func configuration(c mesh.Configuration) *control.Configuration {
	return &control.Configuration{ID: c.ID, Version: c.Version, Voters: c.Voters, Pending: c.Pending,
		Previous: c.Previous, Retired: c.Retired}
}
