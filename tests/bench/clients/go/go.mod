// tests/bench/clients/go: the Go driver of the clients scenario (issue 26).
// The client module comes from this repository's clients/go through the
// replace directive: no download, standard library only.
module rmqs-bench-clients-go

go 1.19

require github.com/rmq-scheduler/rmq-scheduler/clients/go v0.0.0

replace github.com/rmq-scheduler/rmq-scheduler/clients/go => ../../../../clients/go
