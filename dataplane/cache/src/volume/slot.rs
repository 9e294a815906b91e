//! The lock around a volume's owner: whichever task finds it free uses the
//! owner in place (see [`super::owner`]).
//!
//! Every hit served in place takes and releases it once, so its cost is on
//! every hit. `std::sync::Mutex` releases with an atomic swap, since it must
//! learn whether a thread sleeps on it; on x86 that is a full barrier,
//! which waits for the hit's 4 KiB copy to leave the store buffer (about a
//! quarter of the in-place hit's own CPU in a profile of the target). A
//! spin lock releases with a plain store.
//!
//! Waiting is rare and short: queue pairs only ever try the lock, and the
//! owner's task, the one waiter, waits for at most one hit in place,
//! yielding its thread meanwhile so that a holder preempted on the same
//! CPU gets to finish.
//!
//! Poisoned as `std`'s mutex is: a guard dropped by a panic marks the slot,
//! and later lockers get [`std::sync::PoisonError`]s, so a half-updated
//! owner is never used as if nothing happened.

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{LockResult, PoisonError, TryLockError, TryLockResult};

use spin::mutex::{SpinMutex, SpinMutexGuard};
use spin::relax::Yield;

/// A value behind a spin lock with `std`'s poisoning.
pub(crate) struct Slot<T> {
    value: SpinMutex<T, Yield>,
    poisoned: AtomicBool,
}

/// Access to a [`Slot`]'s value until dropped. Not `Send`, as `std`'s
/// guard: a task cannot hold it across an `await`, where it could sleep
/// with the lock held while others spin.
pub(crate) struct SlotGuard<'a, T> {
    guard: SpinMutexGuard<'a, T, Yield>,
    poisoned: &'a AtomicBool,
    _not_send: PhantomData<*const ()>,
}

impl<T> Slot<T> {
    pub(crate) fn new(value: T) -> Self {
        Slot {
            value: SpinMutex::new(value),
            poisoned: AtomicBool::new(false),
        }
    }

    /// The value, waiting (and yielding the thread) while another holds it.
    pub(crate) fn lock(&self) -> LockResult<SlotGuard<'_, T>> {
        self.checked(self.value.lock())
    }

    /// The value if nobody holds it.
    pub(crate) fn try_lock(&self) -> TryLockResult<SlotGuard<'_, T>> {
        match self.value.try_lock() {
            Some(g) => self.checked(g).map_err(TryLockError::Poisoned),
            None => Err(TryLockError::WouldBlock),
        }
    }

    fn checked<'a>(&'a self, guard: SpinMutexGuard<'a, T, Yield>) -> LockResult<SlotGuard<'a, T>> {
        let g = SlotGuard {
            guard,
            poisoned: &self.poisoned,
            _not_send: PhantomData,
        };
        if self.poisoned.load(Relaxed) {
            Err(PoisonError::new(g))
        } else {
            Ok(g)
        }
    }
}

impl<T> Deref for SlotGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for SlotGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

impl<T> Drop for SlotGuard<'_, T> {
    fn drop(&mut self) {
        // The lock's own release comes after this, in the inner guard's
        // drop, so the next holder sees the mark.
        if std::thread::panicking() {
            self.poisoned.store(true, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time() {
        let s = Slot::new(1);
        let mut g = s.try_lock().expect("free");
        *g += 1;
        assert!(matches!(s.try_lock(), Err(TryLockError::WouldBlock)));
        drop(g);
        assert_eq!(*s.lock().expect("not poisoned"), 2);
    }

    #[test]
    fn a_panic_while_held_poisons_it() {
        let s = std::sync::Arc::new(Slot::new(0));
        let s2 = s.clone();
        let r = std::thread::spawn(move || {
            let _g = s2.lock().expect("not poisoned yet");
            panic!("while holding the slot");
        })
        .join();
        assert!(r.is_err(), "the thread panicked");
        assert!(matches!(s.try_lock(), Err(TryLockError::Poisoned(_))));
        let Err(p) = s.lock() else {
            panic!("a poisoned slot locked cleanly");
        };
        // The value is still reachable, to be cleaned up.
        assert_eq!(*p.into_inner(), 0);
    }

    #[test]
    fn waiters_get_it_in_turn() {
        let s = std::sync::Arc::new(Slot::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        *s.lock().expect("not poisoned") += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("no panic");
        }
        assert_eq!(*s.lock().expect("not poisoned"), 40_000);
    }
}
