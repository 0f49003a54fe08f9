// The double binary tree's pure shape functions (algorithms/tree_shape.h): for every n in 1..64 both trees are
// binary trees over all ranks with consistent parent/child links and the documented roots, leaves of one are
// interior in the other, the depth is logarithmic, and the rank-level trees chain the ranks of each host.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "algorithms/tree_shape.h"

using namespace chorus::algo;

namespace {

std::vector<TreeLinks> linksOf(int n, int t) {
  std::vector<TreeLinks> tree(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    BinaryNode b = doubleTree(n, r, t);
    tree[static_cast<size_t>(r)].parent = b.parent;
    for (int c : b.child)
      if (c >= 0) tree[static_cast<size_t>(r)].children.push_back(c);
  }
  return tree;
}

// Edges on the longest root-to-leaf path.
int treeDepth(const std::vector<TreeLinks>& tree) {
  int deepest = 0;
  for (size_t r = 0; r < tree.size(); ++r) {
    int d = 0;
    for (int x = static_cast<int>(r); tree[static_cast<size_t>(x)].parent >= 0 && d <= static_cast<int>(tree.size());
         x = tree[static_cast<size_t>(x)].parent)
      ++d;
    deepest = std::max(deepest, d);
  }
  return deepest;
}

// Every rank has a parent except one root, links agree in both directions, and every rank reaches the root.
void expectTree(const std::vector<TreeLinks>& tree, int expectedRoot, const std::string& what) {
  const int n = static_cast<int>(tree.size());
  int roots = 0;
  for (int r = 0; r < n; ++r) {
    const TreeLinks& l = tree[static_cast<size_t>(r)];
    if (l.parent < 0) {
      ++roots;
      EXPECT_EQ(r, expectedRoot) << what;
    } else {
      ASSERT_LT(l.parent, n) << what << " rank " << r;
      const auto& sib = tree[static_cast<size_t>(l.parent)].children;
      EXPECT_EQ(std::count(sib.begin(), sib.end(), r), 1) << what << ": rank " << r << "'s parent " << l.parent
                                                          << " does not list it as a child";
    }
    for (int c : l.children) {
      ASSERT_TRUE(c >= 0 && c < n && c != r) << what << " rank " << r << " child " << c;
      EXPECT_EQ(tree[static_cast<size_t>(c)].parent, r) << what << ": child " << c << " of rank " << r;
    }
    int hops = 0;
    for (int x = r; tree[static_cast<size_t>(x)].parent >= 0; x = tree[static_cast<size_t>(x)].parent)
      ASSERT_LE(++hops, n) << what << ": rank " << r << " is on a cycle";
  }
  EXPECT_EQ(roots, n > 0 ? 1 : 0) << what;
}

}  // namespace

TEST(TreeShape, EightRanksExplicitly) {
  // Tree 0: 0 - 4 - {2 - {1, 3}, 6 - {5, 7}}; tree 1 is its mirror: 7 - 3 - {5 - {6, 4}, 1 - {2, 0}}.
  struct Want { int parent, c0, c1; };
  const Want t0[8] = {{-1, 4, -1}, {2, -1, -1}, {4, 1, 3}, {2, -1, -1}, {0, 2, 6}, {6, -1, -1}, {4, 5, 7}, {6, -1, -1}};
  const Want t1[8] = {{1, -1, -1}, {3, 2, 0}, {1, -1, -1}, {7, 5, 1}, {5, -1, -1}, {3, 6, 4}, {5, -1, -1}, {-1, 3, -1}};
  for (int r = 0; r < 8; ++r) {
    BinaryNode a = doubleTree(8, r, 0), b = doubleTree(8, r, 1);
    EXPECT_EQ(a.parent, t0[r].parent) << r;
    EXPECT_EQ(a.child[0], t0[r].c0) << r;
    EXPECT_EQ(a.child[1], t0[r].c1) << r;
    EXPECT_EQ(b.parent, t1[r].parent) << r;
    EXPECT_EQ(b.child[0], t1[r].c0) << r;
    EXPECT_EQ(b.child[1], t1[r].c1) << r;
  }
}

TEST(TreeShape, OddCountShiftsByOne) {
  // n = 5, tree 0: 0 - 4 - 2 - {1, 3}; tree 1 is that shifted by one: 1 - 0 - 3 - {2, 4}.
  EXPECT_EQ(doubleTree(5, 1, 1).parent, -1);
  EXPECT_EQ(doubleTree(5, 1, 1).child[0], 0);
  EXPECT_EQ(doubleTree(5, 0, 1).parent, 1);
  EXPECT_EQ(doubleTree(5, 0, 1).child[0], 3);
  EXPECT_EQ(doubleTree(5, 3, 1).child[0], 2);
  EXPECT_EQ(doubleTree(5, 3, 1).child[1], 4);
  EXPECT_EQ(doubleTree(5, 4, 0).child[1], -1);  // 4 + 1 = 5 does not exist
}

TEST(TreeShape, BothTreesAreBinaryTreesForEveryCount) {
  for (int n = 1; n <= 64; ++n) {
    expectTree(linksOf(n, 0), 0, "n=" + std::to_string(n) + " tree 0");
    int root1 = n % 2 == 0 ? n - 1 : (n == 1 ? 0 : 1);
    expectTree(linksOf(n, 1), root1, "n=" + std::to_string(n) + " tree 1");
    for (int t = 0; t < 2; ++t) {
      for (int r = 0; r < n; ++r) EXPECT_LE(linksOf(n, t)[static_cast<size_t>(r)].children.size(), 2u);
      // Log depth: the root's single child heads a complete-as-possible in-order tree.
      int bound = n == 1 ? 0 : static_cast<int>(std::ceil(std::log2(n)));
      EXPECT_LE(treeDepth(linksOf(n, t)), bound) << "n=" << n << " tree " << t;
    }
  }
}

TEST(TreeShape, LeavesOfOneTreeAreInteriorInTheOther) {
  for (int n = 2; n <= 64; ++n) {
    std::vector<TreeLinks> a = linksOf(n, 0), b = linksOf(n, 1);
    int both = 0, neither = 0;
    for (int r = 0; r < n; ++r) {
      bool ia = !a[static_cast<size_t>(r)].children.empty(), ib = !b[static_cast<size_t>(r)].children.empty();
      both += ia && ib;
      neither += !ia && !ib;
      if (n % 2 == 1 && ia && ib) {
        EXPECT_EQ(r, 0) << "n=" << n;
      }
    }
    EXPECT_EQ(both, n % 2 == 0 ? 0 : 1) << "n=" << n;  // odd n: only rank 0 (root of tree 0) is interior twice
    EXPECT_EQ(neither, 0) << "n=" << n;  // every rank forwards data in one tree
  }
}

TEST(TreeShape, HostTreeWithOneRankPerHostIsTheDoubleTree) {
  for (int n = 1; n <= 33; ++n) {
    std::vector<int> hostOf(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) hostOf[static_cast<size_t>(r)] = r;
    std::vector<TreeLinks> want = linksOf(n, 0), want1 = linksOf(n, 1);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(hostTree(hostOf, r, 0), want[static_cast<size_t>(r)]) << "n=" << n << " rank " << r;
      EXPECT_EQ(hostTree(hostOf, r, 1), want1[static_cast<size_t>(r)]) << "n=" << n << " rank " << r;
    }
  }
}

TEST(TreeShape, RanksOfAHostFormAChainUnderTheHostTree) {
  // 3 hosts x 2 ranks, ranks interleaved across hosts: host 0 = {0, 3}, host 1 = {1, 4}, host 2 = {2, 5}.
  std::vector<int> hostOf = {0, 1, 2, 0, 1, 2};
  // Host tree 0 over 3 hosts: 0 - 2 - 1. Chains ascending: 0-3, 1-4, 2-5.
  EXPECT_EQ(hostTree(hostOf, 0, 0), (TreeLinks{-1, {3, 2}}));
  EXPECT_EQ(hostTree(hostOf, 3, 0), (TreeLinks{0, {}}));
  EXPECT_EQ(hostTree(hostOf, 2, 0), (TreeLinks{0, {5, 1}}));
  EXPECT_EQ(hostTree(hostOf, 1, 0), (TreeLinks{2, {4}}));
  // Host tree 1 (3 hosts, shifted): 1 - 0 - 2. Chains descending: 3-0, 4-1, 5-2.
  EXPECT_EQ(hostTree(hostOf, 4, 1), (TreeLinks{-1, {1, 3}}));
  EXPECT_EQ(hostTree(hostOf, 3, 1), (TreeLinks{4, {0, 5}}));
  EXPECT_EQ(hostTree(hostOf, 5, 1), (TreeLinks{3, {2}}));
  // One host: two chains in opposite directions.
  std::vector<int> one(5, 0);
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(hostTree(one, r, 0).parent, r - 1);
    EXPECT_EQ(hostTree(one, r, 1).parent, r == 4 ? -1 : r + 1);
  }
}

TEST(TreeShape, RandomHostLayoutsGiveTrees) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    int n = 1 + static_cast<int>(rng() % 40), hosts = 1 + static_cast<int>(rng() % static_cast<unsigned>(n));
    std::vector<std::string> ids(static_cast<size_t>(n));
    for (auto& id : ids) id = "h" + std::to_string(rng() % static_cast<unsigned>(hosts));
    std::vector<int> hostOf = hostIndices(ids);
    EXPECT_EQ(hostOf[0], 0);
    for (int t = 0; t < 2; ++t) {
      std::vector<TreeLinks> tree;
      for (int r = 0; r < n; ++r) tree.push_back(hostTree(hostOf, r, t));
      int root = -1;
      for (int r = 0; r < n; ++r)
        if (tree[static_cast<size_t>(r)].parent < 0) root = r;
      expectTree(tree, root, "trial " + std::to_string(trial) + " tree " + std::to_string(t));
      for (int r = 0; r < n; ++r) EXPECT_LE(tree[static_cast<size_t>(r)].children.size(), 3u);
      for (int r = 0; r < n; ++r) {
        int walked = 0;
        for (int x = tree[static_cast<size_t>(r)].parent; x >= 0; x = tree[static_cast<size_t>(x)].parent) ++walked;
        EXPECT_EQ(hostTreeDepth(hostOf, r, t), walked) << "trial " << trial << " tree " << t << " rank " << r;
      }
    }
  }
}

TEST(TreeShape, StatsForTheCostModel) {
  for (int n = 1; n <= 64; ++n) {
    DoubleTreeStats st = doubleTreeStats(n);
    EXPECT_EQ(st.depth, std::max(treeDepth(linksOf(n, 0)), treeDepth(linksOf(n, 1)))) << n;
    const std::vector<TreeLinks> trees[2] = {linksOf(n, 0), linksOf(n, 1)};
    int most = 0;
    for (int r = 0; r < n; ++r) {
      int load = 0;
      for (const auto& tree : trees) {
        const TreeLinks& l = tree[static_cast<size_t>(r)];
        load += (l.parent >= 0 ? 1 : 0) + static_cast<int>(l.children.size());
      }
      most = std::max(most, load);
    }
    EXPECT_EQ(st.load, most) << n;
  }
  EXPECT_EQ(doubleTreeStats(2).load, 2);
  EXPECT_EQ(doubleTreeStats(8).load, 4);
  EXPECT_EQ(doubleTreeStats(8).depth, 3);
}
