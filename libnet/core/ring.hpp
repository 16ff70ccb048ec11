// A double-ended FIFO on one growable power-of-two array: after warm-up it
// never allocates, unlike std::deque, which allocates and frees blocks as
// its ends move.
#ifndef PVFS_LIBNET_CORE_RING_HPP
#define PVFS_LIBNET_CORE_RING_HPP

#include <cstddef>
#include <utility>
#include <vector>

namespace bmi {

template <typename T> class RingQueue {
public:
    class iterator {
    public:
        iterator(RingQueue *q, std::size_t i) : q_(q), i_(i) {}
        T &operator*() const { return q_->at(i_); }
        T *operator->() const { return &q_->at(i_); }
        iterator &operator++()
        {
            ++i_;
            return *this;
        }
        bool operator==(const iterator &o) const { return i_ == o.i_; }
        bool operator!=(const iterator &o) const { return i_ != o.i_; }
        [[nodiscard]] std::size_t index() const { return i_; }

    private:
        RingQueue *q_;
        std::size_t i_;
    };

    [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    T &front() { return at(0); }
    iterator begin() { return iterator(this, 0); }
    iterator end() { return iterator(this, size_); }

    void push_back(T &&v)
    {
        reserve_one();
        at(size_) = std::move(v);
        ++size_;
    }
    void push_front(T &&v)
    {
        reserve_one();
        head_ = (head_ + buf_.size() - 1) & (buf_.size() - 1);
        ++size_;
        at(0) = std::move(v);
    }
    void pop_front()
    {
        at(0) = T{}; // release what the element holds now
        head_ = (head_ + 1) & (buf_.size() - 1);
        --size_;
    }
    // Removes the element at it; later elements move up.  O(n): for rare
    // paths (cancellation).
    iterator erase(iterator it)
    {
        for (std::size_t i = it.index(); i + 1 < size_; ++i)
            at(i) = std::move(at(i + 1));
        at(size_ - 1) = T{};
        --size_;
        return it;
    }
    void clear()
    {
        while (!empty())
            pop_front();
        head_ = 0;
    }

private:
    T &at(std::size_t i) { return buf_[(head_ + i) & (buf_.size() - 1)]; }
    void reserve_one()
    {
        if (size_ < buf_.size())
            return;
        std::vector<T> bigger(buf_.empty() ? 8 : buf_.size() * 2);
        for (std::size_t i = 0; i < size_; ++i)
            bigger[i] = std::move(at(i));
        buf_ = std::move(bigger);
        head_ = 0;
    }

    std::vector<T> buf_;
    std::size_t head_ = 0;
    std::size_t size_ = 0;
};

} // namespace bmi

#endif // PVFS_LIBNET_CORE_RING_HPP
