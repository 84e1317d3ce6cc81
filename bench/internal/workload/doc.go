// Package workload runs the benchmark's workloads against any lock service,
// so that every row of the table — lockmesh, the network floor and the
// peers (hashicorp/raft, etcd, Redlock, in the separate bench/peers module)
// — is measured by the same code:
//
//   - Latency: one goroutine repeats one operation (Acquire+Release of one
//     key, or one network round) n times; p50, p99, p99.9.
//   - Throughput: g goroutines repeat their own operation (each on its own
//     key) for a fixed time; operations per second and CPU time per
//     operation, the CPU read from the kernel for every process involved.
//   - Handover: g goroutines contend for one key; from the holds they
//     record, the time from each release to the next grant.
//
// The package imports nothing but the standard library: the peers module
// imports it through a replace directive and must not drag lockmesh's
// dependencies along.
package workload
