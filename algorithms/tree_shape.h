// Tree shapes for the double binary tree (Note [Double binary tree] in algorithms/tree.cc): pure functions,
// unit-tested in test/test_tree_shape.cc.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace chorus::algo {

// A node of a binary tree over 0..n-1: parent -1 at the root, children -1 where absent.
struct BinaryNode {
  int parent = -1;
  int child[2] = {-1, -1};
};

// The in-order ("bit pattern") binary tree: a rank whose lowest set bit is 2^k sits k levels above the leaves,
// so odd ranks are the leaves; its children are r - 2^(k-1) and r + 2^(k-1) (the right one moved down a level
// while it does not exist), its parent r + 2^k or r - 2^k, whichever has 2^(k+1) as its lowest bit (the other
// one when that does not exist). Rank 0 is the root, with a single child: the largest power of two below n.
BinaryNode inorderTree(int n, int r);

// Tree t (0 or 1) of the double binary tree over n nodes. Tree 0 is inorderTree; tree 1 mirrors it
// (r -> n-1-r) when n is even and shifts it by one (r -> r+1 mod n) when n is odd, so that the leaves of one
// are the interior nodes of the other: every node is interior in at most one tree (n even), or all but one
// (n odd).
BinaryNode doubleTree(int n, int r, int t);

// A rank's place in one tree of the rank-level topology.
struct TreeLinks {
  int parent = -1;            // -1 at the root
  std::vector<int> children;  // in the order messages to/from them are posted
  bool operator==(const TreeLinks&) const = default;
};

// The rank-level tree t over ranks grouped by host (hostOf[r] = host index of rank r, hosts numbered by the
// first rank on them): the ranks of a host form a chain (ascending for tree 0, descending for tree 1, so the
// two trees' chains run in opposite directions), and the first rank of each chain joins doubleTree(hosts, ., t)
// with the other hosts' chain heads. With one rank per host it is the double binary tree itself.
TreeLinks hostTree(const std::vector<int>& hostOf, int r, int t);

// Rank r's depth (edges from the root) in hostTree(hostOf, ., t): its place in its host's chain plus its host's
// depth in the double binary tree over hosts. One pass over hostOf, not a walk up hostTree's parents.
int hostTreeDepth(const std::vector<int>& hostOf, int r, int t);

// What the cost model needs of the double binary tree over n nodes: `depth`, the edges on the longest
// root-to-leaf path of either tree, and `load`, the messages (half-buffers) the busiest node sends per chunk:
// one up in each tree where it has a parent, one down per child (2 for n = 2, 4 for most larger n).
struct DoubleTreeStats {
  int depth = 0;
  int load = 0;
};
DoubleTreeStats doubleTreeStats(int n);

// The tree's pipeline chunk for an allreduce of `bytes`: CHORUS_CHUNK_BYTES, but small enough that each half
// is cut into at least 2 chunks (not below 32 KiB), so that mid-sized messages pipeline along the tree's depth
// instead of being stored and forwarded whole at every hop. Smaller chunks measured slower on the simulated
// cluster (scripts/netns-cluster, 8 hosts, 1 Gbit/s, 0.5 ms: 32 KiB took 16.5 ms with 4 KiB chunks against
// 5-6 ms for one chunk per half; 64 KiB 7.9 ms with 16 KiB chunks against 6.3 with 32 KiB).
inline size_t treeChunkBytes(size_t bytes, size_t chunkBytes) {
  size_t halfOfHalf = (bytes / 2 + 1) / 2;
  size_t c = halfOfHalf < 32768 ? 32768 : halfOfHalf;
  return c < chunkBytes ? c : chunkBytes;
}

// Host index of every rank from host identities, numbered in order of first appearance.
std::vector<int> hostIndices(const std::vector<std::string>& hostIds);

}  // namespace chorus::algo
