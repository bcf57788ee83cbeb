// leasehold-netns-relay: TCP between network namespaces, built by ../build.sh.
module leasehold.dev/node/relay

go 1.26.0

require golang.org/x/sys v0.40.0
