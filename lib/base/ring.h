// A FIFO over blocks of slots that are reused, never freed while it lives: push_back hands out a slot to fill
// (what the previous occupant left, e.g. a vector's capacity, is kept) and allocates only when the queue is deeper
// than it has ever been, one block at a time; elements never move except, when it grows, the fewer than kBlock
// newest that share the front's block. std::deque allocates and frees a block every few elements as a queue
// moves; a doubling array would touch twice the deepest queue's memory, and fresh pages are what cost here
// (Note [Allocation-free queueing] in lib/comm/executor.cc).
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace chorus {

template <class T, size_t kBlock = 64>
class Ring {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  T& front() { return at(head_); }
  // The slot behind the last element, now part of the queue; the caller assigns every field it uses.
  T& push_back() {
    if (size_ == capacity()) grow();
    T& slot = at((head_ + size_) % capacity());
    ++size_;
    return slot;
  }
  // Drops the front element; its slot keeps what it holds until reused (swap out what must not stay).
  void pop_front() {
    head_ = (head_ + 1) % capacity();
    --size_;
  }

 private:
  struct Block {
    T slots[kBlock];
  };
  size_t capacity() const { return blocks_.size() * kBlock; }
  T& at(size_t i) { return blocks_[i / kBlock]->slots[i % kBlock]; }

  // Full: the free space is a new block placed before the front's. The front's block holds the oldest elements
  // from the front on and, before it, the newest (o of them); those move to the same places in the new block,
  // which then comes last in queue order, followed by the o slots they left.
  void grow() {
    const size_t hb = blocks_.empty() ? 0 : head_ / kBlock, o = head_ % kBlock;
    auto fresh = std::make_unique<Block>();
    for (size_t i = 0; i < o; ++i) fresh->slots[i] = std::move(blocks_[hb]->slots[i]);
    blocks_.insert(blocks_.begin() + static_cast<std::ptrdiff_t>(hb), std::move(fresh));
    if (size_ > 0) head_ += kBlock;
  }

  std::vector<std::unique_ptr<Block>> blocks_;
  size_t head_ = 0, size_ = 0;
};

}  // namespace chorus
