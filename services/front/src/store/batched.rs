//! Small calls that callers make at the same moment, made together.
//!
//! On a database, a transaction of one row costs a round trip and a commit
//! of its own, and a statement that reads one row costs nearly what one that
//! reads fifty does. Callers of [`Batched`] queue their item; one of them
//! leads, takes every item queued and makes one call for them all, then
//! answers each caller with its share of the result. Callers that arrive
//! meanwhile queue for the next call, which starts once a call ends, or at
//! once while fewer calls than the batch's limit are running.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use crate::error::{Error, Result};

/// See the module docs. `R` is what each item is answered with.
#[derive(Debug)]
pub(in crate::store) struct Batched<T, R = ()> {
    waiting: Mutex<Waiting<T, R>>,
    /// Signalled when a leader is done.
    done: Condvar,
    /// The most calls running at once.
    calls: usize,
}

#[derive(Debug)]
struct Waiting<T, R> {
    items: Vec<(T, Arc<Answer<R>>)>,
    /// Items ever queued, and ever taken by a leader: an item is waiting
    /// in `items` while its place in the queue is at or after `taken`.
    queued: u64,
    taken: u64,
    /// Calls running now.
    running: usize,
}

type Answer<R> = Mutex<Option<Result<R>>>;

impl<T, R> Default for Batched<T, R> {
    /// One call at a time.
    fn default() -> Self {
        Self::new(1)
    }
}

/// The lead of one call, handed on when it drops (a panic too): the items
/// it took and has not answered are answered with an error then, so that
/// no caller waits for a call that will not answer.
struct Lead<'a, T, R> {
    batched: &'a Batched<T, R>,
    unanswered: Vec<Arc<Answer<R>>>,
}

impl<T, R> Drop for Lead<'_, T, R> {
    fn drop(&mut self) {
        for answer in &self.unanswered {
            *lock(answer) = Some(Err(Error::internal("a batched call ended without answering")));
        }
        lock(&self.batched.waiting).running -= 1;
        self.batched.done.notify_all();
    }
}

impl<T> Batched<T> {
    /// Queues `item` and returns once it is written: by `write`, with the
    /// items queued beside it, when this caller leads, or by a leader
    /// before.
    pub fn run(&self, item: T, write: impl FnOnce(Vec<T>) -> Result<()>) -> Result<()> {
        self.each(item, |items| {
            let count = items.len();
            write(items).map(|()| vec![(); count])
        })
    }
}

impl<T, R> Batched<T, R> {
    /// A batch that makes at most `calls` calls at once (at least one).
    pub fn new(calls: usize) -> Self {
        let waiting = Waiting { items: Vec::new(), queued: 0, taken: 0, running: 0 };
        Self { waiting: Mutex::new(waiting), done: Condvar::new(), calls: calls.max(1) }
    }

    /// Queues `item` and returns its answer: the one at its place in what
    /// `call` returns for the items it is given (in their order, one each),
    /// or the error of that call.
    pub fn each(&self, item: T, call: impl FnOnce(Vec<T>) -> Result<Vec<R>>) -> Result<R> {
        let answer = Arc::new(Answer::default());
        let mut waiting = lock(&self.waiting);
        let place = waiting.queued;
        waiting.queued += 1;
        waiting.items.push((item, answer.clone()));
        loop {
            if let Some(result) = lock(&answer).take() {
                return result;
            }
            // Taken by a call that is running: its leader answers it.
            let still_queued = place >= waiting.taken;
            if still_queued && waiting.running < self.calls {
                break;
            }
            waiting = self.done.wait(waiting).unwrap_or_else(PoisonError::into_inner);
        }
        // Nobody took this item: a leader answers what it takes before it
        // hands the lead on.
        waiting.running += 1;
        waiting.taken = waiting.queued;
        let (items, answers): (Vec<T>, Vec<Arc<Answer<R>>>) = std::mem::take(&mut waiting.items).into_iter().unzip();
        drop(waiting);
        let mut lead = Lead { batched: self, unanswered: answers };
        let results = call(items);
        let answers = std::mem::take(&mut lead.unanswered);
        match results {
            Ok(results) if results.len() == answers.len() => {
                for (other, result) in answers.iter().zip(results) {
                    *lock(other) = Some(Ok(result));
                }
            }
            Ok(results) => {
                let error = Error::internal(format!("{} answers for {} batched items", results.len(), answers.len()));
                for other in &answers {
                    *lock(other) = Some(Err(error.clone()));
                }
            }
            Err(error) => {
                for other in &answers {
                    *lock(other) = Some(Err(error.clone()));
                }
            }
        }
        drop(lead);
        lock(&answer).take().unwrap_or_else(|| Err(Error::internal("a batched call was not answered")))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_caller_is_answered_and_callers_that_wait_together_share_a_write() {
        let batched = Batched::default();
        let writes = Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for thread in 0..8u32 {
                let (batched, writes) = (&batched, &writes);
                scope.spawn(move || {
                    for n in 0..50 {
                        batched
                            .run(thread * 100 + n, |items| {
                                // Long enough that the others queue meanwhile.
                                std::thread::sleep(std::time::Duration::from_micros(200));
                                lock(writes).push(items);
                                Ok(())
                            })
                            .unwrap();
                    }
                });
            }
        });
        let writes = writes.into_inner().unwrap();
        let mut written: Vec<u32> = writes.iter().flatten().copied().collect();
        written.sort_unstable();
        let expected: Vec<u32> = (0..8).flat_map(|thread| (0..50).map(move |n| thread * 100 + n)).collect();
        assert_eq!(written, expected, "each item written once");
        assert!(writes.len() < 400, "{} writes for 400 items", writes.len());
    }

    #[test]
    fn each_caller_gets_its_own_answer_from_calls_that_run_up_to_the_limit_at_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let batched: Batched<u32, u32> = Batched::new(3);
        let (calls, running, most) = (AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|scope| {
            for thread in 0..8u32 {
                let (batched, calls, running, most) = (&batched, &calls, &running, &most);
                scope.spawn(move || {
                    for n in 0..50 {
                        let item = thread * 100 + n;
                        let answer = batched
                            .each(item, |items| {
                                calls.fetch_add(1, Ordering::SeqCst);
                                most.fetch_max(running.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                                std::thread::sleep(std::time::Duration::from_micros(200));
                                running.fetch_sub(1, Ordering::SeqCst);
                                Ok(items.iter().map(|item| item * 2).collect())
                            })
                            .unwrap();
                        assert_eq!(answer, item * 2);
                    }
                });
            }
        });
        let (calls, most) = (calls.into_inner(), most.into_inner());
        assert!(calls < 400, "{calls} calls for 400 items");
        assert!((2..=3).contains(&most), "{most} calls ran at once");
        let short = batched.each(1, |_| Ok(Vec::new()));
        assert!(short.unwrap_err().message().contains("0 answers for 1"));
    }

    #[test]
    fn a_call_that_panics_answers_the_items_it_took_with_an_error() {
        let batched: Arc<Batched<u32, u32>> = Arc::new(Batched::default());
        let until = |done: fn(&Waiting<u32, u32>) -> bool| {
            let batched = batched.clone();
            move || {
                while !done(&lock(&batched.waiting)) {
                    std::thread::yield_now();
                }
            }
        };
        // A first call runs until two more items queue behind it; the
        // second call takes both, and its leader's closure panics.
        let first = {
            let (batched, both_queued) = (batched.clone(), until(|waiting| waiting.items.len() == 2));
            std::thread::spawn(move || {
                batched.each(0, |_| {
                    both_queued();
                    Ok(vec![0])
                })
            })
        };
        until(|waiting| waiting.running == 1)();
        let (sender, outcomes) = std::sync::mpsc::channel();
        for item in 1..=2 {
            let (batched, sender) = (batched.clone(), sender.clone());
            std::thread::spawn(move || {
                let call = || batched.each(item, |_| panic!("the call failed"));
                sender.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(call))).unwrap();
            });
        }
        assert_eq!(first.join().unwrap().unwrap(), 0);
        // Both callers return: neither waits for an answer that never comes.
        let wait = || outcomes.recv_timeout(std::time::Duration::from_secs(30)).expect("a caller returned");
        let outcomes = [wait(), wait()];
        let panicked = outcomes.iter().filter(|outcome| outcome.is_err()).count();
        assert_eq!(panicked, 1, "the leader of the second call panics");
        let answered = outcomes.into_iter().find_map(Result::ok).unwrap();
        assert!(answered.unwrap_err().message().contains("without answering"));
        // The batch goes on.
        assert_eq!(batched.each(3, Ok).unwrap(), 3);
    }

    #[test]
    fn a_failed_write_fails_every_item_in_it() {
        let batched: Batched<u32> = Batched::default();
        let failed = batched.run(1, |_| Err(Error::internal("refused")));
        assert_eq!(failed.unwrap_err().message(), "refused");
        batched.run(2, |items| if items == [2] { Ok(()) } else { Err(Error::internal("stale items")) }).unwrap();
    }
}
