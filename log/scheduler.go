package log

import (
	"container/heap"
	"errors"
	"runtime"
	"sync"
	"time"
)

// ErrSchedulerClosed means a log was opened with a Scheduler that was
// already closed.
var ErrSchedulerClosed = errors.New("log: scheduler closed")

// Scheduler runs the periodic work of many logs - interval flushes,
// checkpoints of the recovery point, retention - so that a process with
// thousands of open logs does not run a goroutine and up to three tickers
// for each. It has one timer goroutine, which keeps every log's jobs in a
// heap ordered by when each is next due, and at most Workers goroutines
// that run the jobs that fell due. Both exist only while there is
// something to do: the timer goroutine while any log is registered, a
// worker while a job is waiting to run. An idle scheduler has no
// goroutine at all.
//
// The jobs of one log never run concurrently with each other (a log's
// flush, checkpoint and retention assume that, as they did when one
// goroutine per log ran them in turn), and a job that falls due again
// while it is still waiting or running runs once more, not once for each
// time it fell due: a slow disk delays the work, it does not pile it up.
// Jobs of different logs run concurrently, at most Workers at a time, so
// the scheduler also bounds how many background fsyncs a process issues
// at once.
//
// A Log registers its jobs when it opens and unregisters them when it
// closes; Close of the log waits for its job that is running, if any, to
// finish. Logs opened without a Scheduler share one of the package's.
//
// A Scheduler is safe for concurrent use.
type Scheduler struct {
	workers int

	mu      sync.Mutex
	timers  jobHeap     // periodic jobs by next due time; guarded by mu
	ready   []*jobGroup // groups with a pending job and no worker yet; guarded by mu
	running int         // worker goroutines; guarded by mu
	ticking bool        // the timer goroutine is running; guarded by mu
	closed  bool        // guarded by mu
	idle    sync.Cond   // on mu: a group's job finished
	wake    chan struct{}
	stop    chan struct{} // closed by Close
	wg      sync.WaitGroup
}

// NewScheduler returns a scheduler that runs at most workers jobs at a
// time; workers <= 0 means the default, max(4, GOMAXPROCS). It starts no
// goroutine until a log registers with it. Close it once the logs using
// it are closed.
func NewScheduler(workers int) *Scheduler {
	if workers <= 0 {
		workers = max(4, runtime.GOMAXPROCS(0))
	}
	s := &Scheduler{workers: workers, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	s.idle.L = &s.mu
	return s
}

// defaultScheduler runs the jobs of the logs opened without a Scheduler.
// It is never closed: its goroutines exist only while such logs are open.
var defaultScheduler = NewScheduler(0)

// Close stops the scheduler: the jobs of logs still registered no longer
// run, and a log opened with it afterwards fails with ErrSchedulerClosed.
// It waits for the jobs running to finish. Closing the logs first is
// cleaner - each then makes its last flush itself - but a log outliving
// its scheduler still closes normally. Close is idempotent.
func (s *Scheduler) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.stop)
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// jobSpec is one job a log registers: run every period (never, if 0, but
// when triggered).
type jobSpec struct {
	period time.Duration
	run    func()
}

// job is a registered jobSpec.
type job struct {
	jobSpec
	g       *jobGroup
	due     time.Time // when it next falls due; guarded by the scheduler's mu
	index   int       // in the scheduler's heap; -1: not in it
	pending bool      // due and not yet started; guarded by the scheduler's mu
}

// jobGroup is the jobs of one log: they run one at a time.
type jobGroup struct {
	s       *Scheduler
	jobs    []*job
	queued  bool // in s.ready; guarded by s.mu
	busy    bool // a worker runs one of the jobs; guarded by s.mu
	stopped bool // guarded by s.mu
}

// register adds the jobs of one log, the first of each periodic job due a
// period from now. The group's jobs run one at a time.
func (s *Scheduler) register(specs ...jobSpec) (*jobGroup, error) {
	g := &jobGroup{s: s}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrSchedulerClosed
	}
	for _, sp := range specs {
		j := &job{jobSpec: sp, g: g, index: -1}
		g.jobs = append(g.jobs, j)
		if sp.period > 0 {
			j.due = now.Add(sp.period)
			heap.Push(&s.timers, j)
		}
	}
	if s.timers.Len() > 0 && !s.ticking {
		s.ticking = true
		s.wg.Add(1)
		go s.tick()
	}
	s.poke()
	return g, nil
}

// trigger makes job i of the group due now, without moving its periodic
// schedule. It never blocks on the job, so a log may call it holding its
// own locks.
func (g *jobGroup) trigger(i int) {
	if g == nil {
		return // not registered yet: Open has not finished (recovery does not roll today)
	}
	s := g.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if g.stopped || s.closed {
		return
	}
	s.makePendingLocked(g.jobs[i])
}

// unregister removes the group's jobs: none starts afterwards. It waits
// for the one running, if any, to finish, so it must not be called from a
// job of the group. Idempotent.
func (g *jobGroup) unregister() {
	s := g.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !g.stopped {
		g.stopped = true
		for _, j := range g.jobs {
			j.pending = false
			if j.index >= 0 {
				heap.Remove(&s.timers, j.index)
			}
		}
		if s.timers.Len() == 0 {
			s.poke() // the timer goroutine may end
		}
	}
	for g.busy {
		s.idle.Wait()
	}
}

// poke wakes the timer goroutine to look at the heap again. Called with mu
// held.
func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// makePendingLocked marks j to run and hands its group to a worker if none
// has it. Called with mu held.
func (s *Scheduler) makePendingLocked(j *job) {
	j.pending = true
	g := j.g
	if g.busy || g.queued {
		return // the worker that has it, or will, runs j too
	}
	g.queued = true
	s.ready = append(s.ready, g)
	if s.running < s.workers {
		s.running++
		s.wg.Add(1)
		go s.work()
	}
}

// tick is the timer goroutine: it makes jobs pending as they fall due. It
// ends when no periodic job is registered or the scheduler is closed.
func (s *Scheduler) tick() {
	defer s.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		s.mu.Lock()
		if s.closed || s.timers.Len() == 0 {
			s.ticking = false
			s.mu.Unlock()
			return
		}
		now := time.Now()
		for s.timers.Len() > 0 && !s.timers[0].due.After(now) {
			j := s.timers[0]
			// As a ticker does: the next tick a period after this one,
			// and the ticks missed while late dropped.
			j.due = j.due.Add(j.period)
			if !j.due.After(now) {
				j.due = now.Add(j.period)
			}
			heap.Fix(&s.timers, 0)
			s.makePendingLocked(j)
		}
		wait := s.timers[0].due.Sub(now)
		s.mu.Unlock()

		t.Reset(wait) // no stale tick survives a Reset (Go 1.23 timers)
		select {
		case <-t.C:
		case <-s.wake:
		case <-s.stop:
		}
	}
}

// work is a worker: it runs the pending jobs of ready groups, one group at
// a time and its jobs in turn, until none is ready.
func (s *Scheduler) work() {
	defer s.wg.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.closed || len(s.ready) == 0 {
			s.running--
			return
		}
		g := s.ready[0]
		s.ready[0] = nil
		s.ready = s.ready[1:]
		g.queued = false
		if g.stopped {
			continue
		}
		g.busy = true
		for _, j := range g.jobs {
			if !j.pending || g.stopped || s.closed {
				continue
			}
			j.pending = false
			s.mu.Unlock()
			j.run()
			s.mu.Lock()
		}
		g.busy = false
		s.idle.Broadcast()
		if g.stopped {
			continue
		}
		for _, j := range g.jobs {
			if j.pending { // fell due again while the group ran: after the others
				g.queued = true
				s.ready = append(s.ready, g)
				break
			}
		}
	}
}

// jobHeap orders periodic jobs by when they are next due.
type jobHeap []*job

func (h jobHeap) Len() int           { return len(h) }
func (h jobHeap) Less(i, k int) bool { return h[i].due.Before(h[k].due) }
func (h jobHeap) Swap(i, k int) {
	h[i], h[k] = h[k], h[i]
	h[i].index = i
	h[k].index = k
}
func (h *jobHeap) Push(x any) {
	j := x.(*job)
	j.index = len(*h)
	*h = append(*h, j)
}
func (h *jobHeap) Pop() any {
	old := *h
	j := old[len(old)-1]
	old[len(old)-1] = nil
	j.index = -1
	*h = old[:len(old)-1]
	return j
}
