package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// The agent's configuration file (-config, docs/agent.md): JSON, one
// object. Its keys are the agent's flags, dashes written as underscores
// ("api_addr" for -api-addr), and three that no flag has: "tokens" (the
// HTTP API's access control, acl.go), "limits" (apiLimits) and
// "socket_requires_token". Precedence: a flag on the command line, then
// the environment (LOCKMESH_...), then the file, then the default.

// agentFile is what the file says beyond flags.
type agentFile struct {
	Tokens              []tokenConfig `json:"tokens"`
	Limits              *apiLimits    `json:"limits"`
	SocketRequiresToken bool          `json:"socket_requires_token"`
}

// applyConfigFile loads the file at path ("": none) into the flags of fs
// that the command line and the environment left unset (fs.Visit: both
// set a flag through fs).
func applyConfigFile(fs *flag.FlagSet, path string) (agentFile, error) {
	if path == "" {
		return agentFile{}, nil
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	return loadAgentFile(path, fs, set)
}

// maxConfigFile bounds the file.
const maxConfigFile = 1 << 20

// loadAgentFile reads path and sets every flag of fs it names that set
// (the flags given on the command line or by the environment) does not
// hold. The agent's own limits start from defaults.
func loadAgentFile(path string, fs *flag.FlagSet, set map[string]bool) (agentFile, error) {
	out := agentFile{}
	b, err := os.ReadFile(path)
	if err != nil {
		return out, err
	}
	if len(b) > maxConfigFile {
		return out, fmt.Errorf("%s: over %d bytes", path, maxConfigFile)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return out, fmt.Errorf("%s: not a JSON object: %w", path, err)
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := raw[k]
		switch k {
		case "tokens":
			err = strictJSON(v, &out.Tokens)
		case "limits":
			lim := defaultAPILimits()
			if err = strictJSON(v, &lim); err == nil {
				err = lim.validate()
			}
			out.Limits = &lim
		case "socket_requires_token":
			err = strictJSON(v, &out.SocketRequiresToken)
		default:
			err = setFromFile(fs, set, k, v)
		}
		if err != nil {
			return out, fmt.Errorf("%s: %q: %w", path, k, err)
		}
	}
	return out, nil
}

func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// setFromFile sets the flag a file key names, unless the command line or
// the environment set it. A list may be a JSON array (seeds, voters).
func setFromFile(fs *flag.FlagSet, set map[string]bool, key string, v json.RawMessage) error {
	name := strings.ReplaceAll(key, "_", "-")
	f := fs.Lookup(name)
	if f == nil || name == "config" {
		return errors.New("not a setting of the agent (see lockmesh agent -h; flags are written with underscores)")
	}
	if set[name] {
		return nil
	}
	var s string
	var list []string
	var num json.Number
	var b bool
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	switch {
	case json.Unmarshal(v, &s) == nil:
	case json.Unmarshal(v, &list) == nil:
		s = strings.Join(list, ",")
	case json.Unmarshal(v, &b) == nil:
		s = strconv.FormatBool(b)
	case dec.Decode(&num) == nil:
		s = num.String()
	default:
		return errors.New("want a string, a number, a boolean or a list of strings")
	}
	return fs.Set(name, s)
}
