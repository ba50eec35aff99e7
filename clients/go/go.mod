module github.com/rmq-scheduler/rmq-scheduler/clients/go

go 1.19
