// Package compose holds the end-to-end suite that runs brook the way a user
// does: the FROM-scratch images of `make images-core` started by the
// repository's docker-compose.yml. TestCompose kills a stream owner's
// container and cuts another owner off the network under publish load, and
// checks that the stream fails over without an operator, that every
// confirmed record is delivered exactly once at its confirmed offset, and
// that the old owner rejoins as a follower without another recovery. With
// the brook/jaeger:dev image present it also checks that a failover's trace
// reaches Jaeger in the `traces` profile.
//
// The suite skips when no Docker engine answers or no docker-compose is
// installed, and in -short mode.
package compose
