// Package compose holds the end-to-end suite that runs brook the way a user
// does: the FROM-scratch images of `make images-core` started by the
// repository's docker-compose.yml, whose NATS is a 3-server cluster
// (nats1, nats2, nats3). TestCompose kills a stream owner's container and
// cuts another owner off the network under publish load, and checks that
// the stream fails over without an operator and that the old owner rejoins
// as a follower without another recovery; then it kills one of the NATS
// servers the services are connected to and checks that every connection
// moves to the other two and writes keep confirming at the same epoch, and
// starts it again. Every confirmed record is delivered exactly once at its
// confirmed offset. With the brook/jaeger:dev image present it also checks
// that a failover's trace reaches Jaeger in the `traces` profile.
//
// Every stack runs with its own credentials: the suite generates a
// brook-auth deployment in a temporary directory (never deploy/secrets) and
// points docker-compose.yml at it with BROOK_SECRETS_DIR; the test's clients
// connect as the admin and client principals. It also checks that every
// container runs as the unprivileged user 65532:65532 and that every NATS
// server refuses a connection without an nkey. A second stack runs with
// docker-compose.tls.yml: nats1 refuses plaintext and certificate-less
// connections, and a stream fails over with every client connection over
// TLS (the services verify the server certificate under the name of
// whichever server they connect to).
//
// The suite skips when no Docker engine answers or no docker-compose is
// installed, and in -short mode.
package compose
