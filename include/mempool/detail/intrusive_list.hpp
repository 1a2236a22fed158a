// The intrusive doubly linked list: the links live in the elements (two pointer
// members named by the template arguments), so adding and removing an element
// allocates nothing and takes O(1). Not thread-safe: its owner locks.
#pragma once

namespace mempool::detail {

template <class T, T* T::*Prev, T* T::*Next>
class IntrusiveList {
 public:
  [[nodiscard]] bool empty() const noexcept { return head_ == nullptr; }
  [[nodiscard]] T* first() const noexcept { return head_; }
  [[nodiscard]] static T* next(const T* element) noexcept { return element->*Next; }

  void push_front(T* element) noexcept {
    element->*Prev = nullptr;
    element->*Next = head_;
    if (head_ != nullptr) head_->*Prev = element;
    head_ = element;
  }

  // element is in this list.
  void remove(T* element) noexcept {
    if (element->*Prev != nullptr) {
      (element->*Prev)->*Next = element->*Next;
    } else {
      head_ = element->*Next;
    }
    if (element->*Next != nullptr) (element->*Next)->*Prev = element->*Prev;
    element->*Prev = element->*Next = nullptr;
  }

  // Forgets every element (a forked child drops the other threads' entries).
  void clear() noexcept { head_ = nullptr; }

 private:
  T* head_ = nullptr;
};

}  // namespace mempool::detail
