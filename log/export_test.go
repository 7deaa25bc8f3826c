package log

// abandon drops the log as a killed process would: no flush, no checkpoint,
// no trimming. What was written stays in the page cache, as it does when a
// process dies; the next Open must recover.
func (l *Log) abandon() {
	if l.closed.Swap(true) {
		return
	}
	l.stopJobs()
	l.notify.Broadcast()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closeSegments(false)
	l.lock.Close()
}
