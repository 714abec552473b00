//! A persistent pool for the many short parallel loops of a decode step.
//!
//! A decode step of a 0.6B model is ~200 parallel loops of ~50-100 us each.
//! Through rayon every loop wakes its sleeping workers with a futex and they
//! go back to sleep after it (perf of a graph decode step: ~20% of cycles in
//! `sched_yield`, futex waits and wake-ups). Here workers spin for a while
//! after each loop (`SPIN`) before parking, so back-to-back loops hand over
//! through one atomic store; the calling thread takes tasks too.
//!
//! The size follows rayon's global pool (what `--threads` sets), so both
//! agree on the thread count. `MLLM_POOL=rayon` routes every loop through
//! rayon instead (for comparison).
//!
//! Safety argument: a job (the closure pointer, its task count and its
//! generation) is published in `slot` before `state` moves to that
//! generation; a worker runs task `i` of a job only under the job's own
//! generation, after a compare-exchange that claims `i` while `state`
//! still holds it, so the caller (which waits until every task
//! of its generation reported done) is still inside `run` and the closure
//! it borrowed is alive.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long an idle worker spins before it parks.
const SPIN: Duration = Duration::from_micros(200);

type Task<'a> = &'a (dyn Fn(usize) + Sync);

struct Job {
    /// The closure, lifetime erased (see the module's safety argument).
    f: *const (dyn Fn(usize) + Sync),
    tasks: usize,
    /// The generation this job runs under. The slot holds the next job a
    /// moment before `state` moves to its generation; a worker that saw the
    /// previous generation must not run it under that one (it would claim
    /// the new closure's tasks past the old count, then the counter resets).
    gen: u64,
}

// The pointer is only dereferenced under the claim protocol above.
unsafe impl Send for Job {}

struct Shared {
    /// generation << 32 | next task index.
    state: AtomicU64,
    done: AtomicUsize,
    slot: Mutex<Option<Job>>,
    /// Workers parked after spinning, and the condvar that wakes them.
    parked: Mutex<usize>,
    wake: Condvar,
}

pub struct Pool {
    shared: &'static Shared,
    workers: usize,
    /// One caller at a time (a second caller runs its loop serially).
    busy: Mutex<()>,
}

fn generation(s: u64) -> u64 {
    s >> 32
}

impl Pool {
    fn new(workers: usize) -> Pool {
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            state: AtomicU64::new(0),
            done: AtomicUsize::new(0),
            slot: Mutex::new(None),
            parked: Mutex::new(0),
            wake: Condvar::new(),
        }));
        for w in 0..workers {
            let spawned = std::thread::Builder::new()
                .name(format!("mllm-pool-{w}"))
                .spawn(move || worker(shared));
            if spawned.is_err() {
                return Pool {
                    shared,
                    workers: w,
                    busy: Mutex::new(()),
                };
            }
        }
        Pool {
            shared,
            workers,
            busy: Mutex::new(()),
        }
    }

    /// The global pool: rayon's thread count minus the calling thread.
    pub fn global() -> &'static Pool {
        static POOL: OnceLock<Pool> = OnceLock::new();
        POOL.get_or_init(|| Pool::new(rayon::current_num_threads().saturating_sub(1)))
    }

    /// Threads that run a loop's tasks (workers and the caller).
    pub fn threads(&self) -> usize {
        self.workers + 1
    }

    /// Runs `f(0) .. f(tasks - 1)` on the pool and the calling thread;
    /// returns when all have run.
    pub fn run(&self, tasks: usize, f: Task) {
        if tasks == 0 {
            return;
        }
        let guard = match self.busy.try_lock() {
            Ok(g) if self.workers > 0 && tasks > 1 => g,
            _ => {
                (0..tasks).for_each(f);
                return;
            }
        };
        let sh = self.shared;
        // Erase the borrow's lifetime: tasks run only while `run` waits below.
        let f_static: *const (dyn Fn(usize) + Sync) =
            unsafe { std::mem::transmute::<Task, Task<'static>>(f) };
        sh.done.store(0, Ordering::Relaxed);
        let gen = generation(sh.state.load(Ordering::Relaxed)) + 1;
        *sh.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(Job {
            f: f_static,
            tasks,
            gen,
        });
        sh.state.store(gen << 32, Ordering::Release);
        if *sh.parked.lock().unwrap_or_else(|e| e.into_inner()) > 0 {
            sh.wake.notify_all();
        }
        claim_and_run(sh, gen, f, tasks);
        while sh.done.load(Ordering::Acquire) < tasks {
            std::hint::spin_loop();
        }
        drop(guard);
    }
}

/// Claims tasks of generation `gen` until none is left.
fn claim_and_run(sh: &Shared, gen: u64, f: Task, tasks: usize) {
    loop {
        let s = sh.state.load(Ordering::Acquire);
        let i = (s & 0xffff_ffff) as usize;
        if generation(s) != gen || i >= tasks {
            return;
        }
        if sh
            .state
            .compare_exchange_weak(s, s + 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            f(i);
            sh.done.fetch_add(1, Ordering::Release);
        }
    }
}

fn worker(sh: &'static Shared) {
    let mut seen = 0u64;
    loop {
        // Spin for a new generation, then park.
        let started = Instant::now();
        let mut spins = 0u32;
        let gen = loop {
            let g = generation(sh.state.load(Ordering::Acquire));
            if g != seen {
                break g;
            }
            spins = spins.wrapping_add(1);
            // Reading the clock costs more than a spin: look every 256.
            if spins.is_multiple_of(256) && started.elapsed() > SPIN {
                let mut parked = sh.parked.lock().unwrap_or_else(|e| e.into_inner());
                *parked += 1;
                while generation(sh.state.load(Ordering::Acquire)) == seen {
                    parked = sh
                        .wake
                        .wait_timeout(parked, Duration::from_millis(50))
                        .map(|(g, _)| g)
                        .unwrap_or_else(|e| e.into_inner().0);
                }
                *parked -= 1;
                continue;
            }
            std::hint::spin_loop();
        };
        seen = gen;
        let job = {
            let slot = sh.slot.lock().unwrap_or_else(|e| e.into_inner());
            slot.as_ref().map(|j| (j.f, j.tasks, j.gen))
        };
        // Only the job of the generation seen: the slot may already hold the
        // next one while `state` still says this one. The claim in
        // `claim_and_run` is checked against `gen` too: a job whose
        // generation has passed never runs.
        if let Some((f, tasks, _)) = job.filter(|j| j.2 == gen) {
            let f: Task = unsafe { &*f };
            claim_and_run(sh, gen, f, tasks);
        }
    }
}

/// `f(i)` for each `i < tasks` in parallel: on the spinning pool, or on
/// rayon with `MLLM_POOL=rayon`.
pub fn for_each(tasks: usize, f: impl Fn(usize) + Sync) {
    static RAYON: OnceLock<bool> = OnceLock::new();
    let rayon = *RAYON.get_or_init(|| std::env::var("MLLM_POOL").is_ok_and(|v| v == "rayon"));
    if rayon {
        use rayon::prelude::*;
        (0..tasks).into_par_iter().for_each(&f);
    } else {
        Pool::global().run(tasks, &f);
    }
}

/// A pointer the tasks of one loop write through, each to its own range.
struct Pieces<T>(*mut T);
unsafe impl<T: Send> Send for Pieces<T> {}
unsafe impl<T: Send> Sync for Pieces<T> {}

impl<T> Pieces<T> {
    fn get(&self) -> *mut T {
        self.0
    }
}

/// `f(i, chunk)` for every `chunk`-long piece of `out` (the last may be
/// shorter), on the pool: what the element-wise kernels of a prefill step
/// use instead of rayon's parallel iterators, so that one set of threads
/// runs the whole step (rayon's workers and the pool's spinning ones would
/// otherwise share the cores).
pub fn for_chunks<T: Send>(out: &mut [T], chunk: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let chunk = chunk.max(1);
    let len = out.len();
    let base = Pieces(out.as_mut_ptr());
    for_each(len.div_ceil(chunk), |i| {
        let start = i * chunk;
        let end = (start + chunk).min(len);
        // SAFETY: task i alone touches `start..end`, inside `out`, which
        // outlives the loop.
        let piece = unsafe { std::slice::from_raw_parts_mut(base.get().add(start), end - start) };
        f(i, piece);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn chunks_cover_the_slice_once() {
        for len in [0usize, 1, 7, 64, 1000] {
            let mut v = vec![0u32; len];
            for_chunks(&mut v, 9, |i, c| {
                for (j, x) in c.iter_mut().enumerate() {
                    *x += (i * 9 + j) as u32 + 1;
                }
            });
            assert!(v.iter().enumerate().all(|(j, &x)| x == j as u32 + 1));
        }
    }

    #[test]
    fn every_task_runs_once_over_many_back_to_back_loops() {
        for round in 0..2000usize {
            let tasks = 1 + round % 37;
            let hits: Vec<AtomicU32> = (0..tasks).map(|_| AtomicU32::new(0)).collect();
            for_each(tasks, |i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(
                hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                "round {round}"
            );
            if round % 500 == 0 {
                // Let the workers park, then wake them again.
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }

    #[test]
    fn loops_from_several_threads_do_not_mix() {
        let handles: Vec<_> = (0..3)
            .map(|t| {
                std::thread::spawn(move || {
                    for _ in 0..300 {
                        let sum = AtomicUsize::new(0);
                        for_each(16, |i| {
                            sum.fetch_add(i + t, Ordering::Relaxed);
                        });
                        assert_eq!(sum.load(Ordering::Relaxed), 120 + 16 * t);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("thread");
        }
    }
}
