package workload

// Row is one line of the results table: a setup and what it measured. The
// main bench program and the peers program both print rows as JSON, and
// the main program merges them into one table and one file.
type Row struct {
	// Case is the name given to -cases (for example "lockmesh", "etcd").
	Case string `json:"case"`
	// Setup says, in words, what ran: nodes, processes, transport,
	// durability, where the caller sits.
	Setup string `json:"setup"`
	// Error, when set, says why the row has no (or only some) figures.
	Error string `json:"error,omitempty"`

	Latency    *Summary          `json:"latency,omitempty"`
	Throughput *ThroughputResult `json:"throughput,omitempty"`
	Handover   *HandoverResult   `json:"handover,omitempty"`

	// Notes are caveats a reader needs to read the figures right.
	Notes []string `json:"notes,omitempty"`
	// Versions of the software measured (peers: module versions).
	Versions map[string]string `json:"versions,omitempty"`
	// Seconds is the wall time the whole case took, setup included.
	Seconds float64 `json:"seconds"`
}
