// Package placement decides which storage agents hold which shards of a
// dataset. It is pure: no goroutines, I/O or clocks; the storage agent feeds
// it the live members it learns through gossip and announces the result, and
// a compute agent can recompute or check what an agent announces.
//
// A dataset's catalog (dense sample ids 0..N-1) is split into a [Layout] of
// fixed shards, numbered 0..S-1 in id order: the tar files as they are when
// the dataset is WebDataset-style shards ([LayoutFromRanges]), or id ranges of
// a fixed size for a folder of images ([Uniform]).
//
// Each shard is held by the r members ranked highest by rendezvous
// (highest-random-weight) hashing: member m's weight for shard s is [Weight],
// the first 8 bytes (big-endian) of SHA-256 over s as 8 bytes big-endian
// followed by m's name. [Owners] ranks a shard's members; [Held] lists the
// shards one member holds; [Assign] does every member at once. Rendezvous
// hashing needs no coordination (every agent computes the same answer from
// the same member list), spreads shards evenly, and moves only about 1/N of
// the ownership slots when a member joins or leaves: a leaving member's
// slots go to the next-ranked members, and a joining member takes only the
// slots it now outranks.
//
// SHA-256 is fixed on every architecture and byte order, and the tests pin a
// few weights, so the placement never changes silently between versions.
package placement
