// An owning, move-only callable that keeps callables of up to `Capacity` bytes in place, as std::function does only
// for the smallest: a queued operation (its lambda holds its call's arguments) then costs no allocation on the
// issuing thread and no free on the worker (Note [Allocation-free queueing] in lib/comm/executor.cc). Larger ones
// go to the heap.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace chorus {

template <class Sig, size_t Capacity>
class InlineFunction;

template <class R, class... Args, size_t Capacity>
class InlineFunction<R(Args...), Capacity> {
 public:
  // Whether F is kept in place.
  template <class F>
  static constexpr bool fitsInline = sizeof(F) <= Capacity && alignof(F) <= alignof(std::max_align_t) &&
                                     std::is_nothrow_move_constructible_v<F>;

  InlineFunction() = default;
  InlineFunction(std::nullptr_t) {}  // NOLINT: as std::function's
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, InlineFunction> && std::is_invocable_r_v<R, F&, Args...>)
  InlineFunction(F&& f) {  // NOLINT: implicit, as std::function's: callers pass lambdas
    using D = std::remove_cvref_t<F>;
    if constexpr (fitsInline<D>) {
      ::new (static_cast<void*>(buf_)) D(std::forward<F>(f));
      ops_ = &kInline<D>;
    } else {
      ::new (static_cast<void*>(buf_)) D*(new D(std::forward<F>(f)));
      ops_ = &kHeap<D>;
    }
  }
  InlineFunction(InlineFunction&& o) noexcept { take(o); }
  InlineFunction& operator=(InlineFunction&& o) noexcept {
    if (this != &o) {
      reset();
      take(o);
    }
    return *this;
  }
  InlineFunction& operator=(std::nullptr_t) noexcept {
    reset();
    return *this;
  }
  InlineFunction(const InlineFunction&) = delete;
  InlineFunction& operator=(const InlineFunction&) = delete;
  ~InlineFunction() { reset(); }

  explicit operator bool() const { return ops_ != nullptr; }
  // const, as std::function's: a lambda that holds one calls it from its own const operator().
  R operator()(Args... args) const {
    return ops_->call(const_cast<unsigned char*>(buf_), std::forward<Args>(args)...);
  }

 private:
  struct Ops {
    R (*call)(void*, Args&&...);
    void (*move)(void* to, void* from) noexcept;  // constructs at `to`, destroys at `from`
    void (*destroy)(void*) noexcept;
  };
  template <class D>
  static constexpr Ops kInline = {
      [](void* p, Args&&... a) -> R { return (*static_cast<D*>(p))(std::forward<Args>(a)...); },
      [](void* to, void* from) noexcept {
        ::new (to) D(std::move(*static_cast<D*>(from)));
        static_cast<D*>(from)->~D();
      },
      [](void* p) noexcept { static_cast<D*>(p)->~D(); }};
  template <class D>
  static constexpr Ops kHeap = {
      [](void* p, Args&&... a) -> R { return (**static_cast<D**>(p))(std::forward<Args>(a)...); },
      [](void* to, void* from) noexcept { ::new (to) D*(*static_cast<D**>(from)); },
      [](void* p) noexcept { delete *static_cast<D**>(p); }};

  void take(InlineFunction& o) noexcept {
    if (o.ops_ == nullptr) return;
    o.ops_->move(buf_, o.buf_);
    ops_ = o.ops_;
    o.ops_ = nullptr;
  }
  void reset() noexcept {
    if (ops_ == nullptr) return;
    ops_->destroy(buf_);
    ops_ = nullptr;
  }

  alignas(std::max_align_t) unsigned char buf_[Capacity];
  const Ops* ops_ = nullptr;
};

}  // namespace chorus
