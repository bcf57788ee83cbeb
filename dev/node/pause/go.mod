// The pod sandbox's pause process, built by ../build.sh into the local pause image.
module leasehold.dev/node/pause

go 1.26.0
