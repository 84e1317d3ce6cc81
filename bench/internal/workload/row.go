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
	// LoadedLatency says that Latency timed every operation of the
	// throughput run (all goroutines at once), not one goroutine alone:
	// such a row has no ratio to the quorum floor.
	LoadedLatency bool `json:"loaded_latency,omitempty"`

	// Figures are what a case measured beyond the table's columns, by
	// name with the unit last ("converge_s", "heap_mb"); -merge takes the
	// median of each over the runs.
	Figures map[string]float64 `json:"figures,omitempty"`
	// Curve is a case's figures at successive points (the churn case:
	// heap by keys locked); -merge takes the median of each figure at
	// each point.
	Curve []Point `json:"curve,omitempty"`

	// Notes are caveats a reader needs to read the figures right.
	Notes []string `json:"notes,omitempty"`
	// Versions of the software measured (peers: module versions).
	Versions map[string]string `json:"versions,omitempty"`
	// Seconds is the wall time the whole case took, setup included.
	Seconds float64 `json:"seconds"`
}

// Point is one point of a Row's Curve: At on the x axis (keys locked, say)
// and the figures read there.
type Point struct {
	At      float64            `json:"at"`
	Figures map[string]float64 `json:"figures"`
}
