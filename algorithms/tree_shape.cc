#include "algorithms/tree_shape.h"

#include <algorithm>
#include <map>

namespace chorus::algo {

BinaryNode inorderTree(int n, int r) {
  BinaryNode node;
  if (r == 0) {
    int top = 1;
    while (top * 2 < n) top *= 2;
    if (n > 1) node.child[0] = top;
    return node;
  }
  const int low = r & -r;
  // r is an odd multiple of low; its parent is the neighbour at distance low that is an odd multiple of 2*low.
  const bool plusPreferred = ((r / low) / 2) % 2 == 0;
  node.parent = plusPreferred && r + low < n ? r + low : r - low;
  if (low > 1) {
    node.child[0] = r - low / 2;
    int step = low / 2;
    while (step > 0 && r + step >= n) step /= 2;
    if (step > 0) node.child[1] = r + step;
  }
  return node;
}

namespace {

BinaryNode mapNode(BinaryNode node, int n, int shift, bool mirror) {
  auto f = [&](int x) { return x < 0 ? -1 : mirror ? n - 1 - x : (x + shift) % n; };
  node.parent = f(node.parent);
  node.child[0] = f(node.child[0]);
  node.child[1] = f(node.child[1]);
  return node;
}

}  // namespace

BinaryNode doubleTree(int n, int r, int t) {
  if (t == 0) return inorderTree(n, r);
  if (n % 2 == 0) return mapNode(inorderTree(n, n - 1 - r), n, 0, true);
  return mapNode(inorderTree(n, (r - 1 + n) % n), n, 1, false);
}

TreeLinks hostTree(const std::vector<int>& hostOf, int r, int t) {
  const int hosts = hostOf.empty() ? 0 : *std::max_element(hostOf.begin(), hostOf.end()) + 1;
  auto chainOf = [&](int h) {
    std::vector<int> chain;
    for (int x = 0; x < static_cast<int>(hostOf.size()); ++x)
      if (hostOf[static_cast<size_t>(x)] == h) chain.push_back(x);
    if (t == 1) std::reverse(chain.begin(), chain.end());
    return chain;
  };
  const int h = hostOf[static_cast<size_t>(r)];
  const std::vector<int> chain = chainOf(h);
  const size_t pos = static_cast<size_t>(std::find(chain.begin(), chain.end(), r) - chain.begin());
  TreeLinks links;
  if (pos + 1 < chain.size()) links.children.push_back(chain[pos + 1]);
  if (pos > 0) {
    links.parent = chain[pos - 1];
    return links;
  }
  BinaryNode node = doubleTree(hosts, h, t);
  if (node.parent >= 0) links.parent = chainOf(node.parent).front();
  for (int c : node.child)
    if (c >= 0) links.children.push_back(chainOf(c).front());
  return links;
}

int hostTreeDepth(const std::vector<int>& hostOf, int r, int t) {
  const int hosts = *std::max_element(hostOf.begin(), hostOf.end()) + 1;
  const int h = hostOf[static_cast<size_t>(r)];
  int depth = 0;  // ranks ahead of r in its chain: lower ones in tree 0, higher ones in tree 1
  for (int x = 0; x < static_cast<int>(hostOf.size()); ++x)
    if (hostOf[static_cast<size_t>(x)] == h && (t == 0 ? x < r : x > r)) ++depth;
  for (int x = doubleTree(hosts, h, t).parent; x >= 0; x = doubleTree(hosts, x, t).parent) ++depth;
  return depth;
}

DoubleTreeStats doubleTreeStats(int n) {
  DoubleTreeStats s;
  for (int r = 0; r < n; ++r) {
    int load = 0;
    for (int t = 0; t < 2; ++t) {
      BinaryNode node = doubleTree(n, r, t);
      load += (node.parent >= 0 ? 1 : 0) + (node.child[0] >= 0 ? 1 : 0) + (node.child[1] >= 0 ? 1 : 0);
      int depth = 0;
      for (int x = r; x >= 0 && depth <= n; x = doubleTree(n, x, t).parent) ++depth;
      s.depth = std::max(s.depth, depth - 1);
    }
    s.load = std::max(s.load, load);
  }
  return s;
}

std::vector<int> hostIndices(const std::vector<std::string>& hostIds) {
  std::map<std::string, int> index;
  std::vector<int> out;
  out.reserve(hostIds.size());
  for (const std::string& id : hostIds) out.push_back(index.emplace(id, static_cast<int>(index.size())).first->second);
  return out;
}

}  // namespace chorus::algo
