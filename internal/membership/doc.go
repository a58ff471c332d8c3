// Package membership is the gossip glue both agents share: every storage and
// compute agent runs one [Node], which joins a hashicorp/memberlist cluster
// and announces a small [Meta] record (role, gRPC address, cores, dataset
// fingerprint, version and, for storage agents, compact placement fields:
// replicas, shard count, layout and held-set digests, egress rate) in
// memberlist's node meta.
//
// A compute agent finds its storage agents with [Node.ByRole] or
// [Node.WaitFor] and re-reads the membership whenever [Node.Changes] fires. A
// storage agent re-announces itself with [Node.UpdateMeta] when, for example,
// its dataset fingerprint becomes known.
//
// Timing is memberlist's LAN preset ([memberlist.DefaultLANConfig]), never the
// local one: on a link shaped to 500 Mbit/s and kept full by the data plane
// the local preset's short probe timeouts make nodes falsely suspect healthy
// peers. [Config.Tune] adjusts the timing for tests and special deployments.
//
// Gossip is encrypted with memberlist's AES-GCM keyring ([Config.SecretKey])
// and labelled with the cluster's name ([Config.Label]), so a node without
// the key or of another cluster cannot join; [New] refuses a Config without
// both unless [Config.Insecure]. Rejected peers are logged at warn level,
// rate-limited and counted through [Config.Warnings] (internal/peerlog).
// [Gossip] is the set-up both agents share; [ParseSecretKey] reads a key
// from a flag or a file.
package membership
