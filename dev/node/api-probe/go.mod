module leasehold.dev/node/api-probe

go 1.26.0
