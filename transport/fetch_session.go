package transport

// Incremental fetch sessions (KIP-227). A consumer of many partitions
// otherwise names every partition in every Fetch and gets every partition
// back, data or not: with 10,000 partitions that is hundreds of KiB each
// way per poll, for nothing. In a session the broker remembers the
// partitions and their fetch positions; the client sends only what changed
// (a new fetch offset, a partition added or forgotten) and the broker
// answers only the partitions that have something to say.
//
// A Fetch (v7+) carries SessionID and SessionEpoch:
//
//	epoch -1 (FINAL)    a full fetch without a session; a SessionID names a
//	                    session to close first.
//	epoch  0 (INITIAL)  a full fetch that asks for a new session (closing
//	                    the one SessionID names): the response carries the
//	                    new session's id (0 if the cache has no room) and
//	                    every partition.
//	epoch  n > 0        an incremental fetch in session SessionID, whose
//	                    epoch must be n (FETCH_SESSION_ID_NOT_FOUND,
//	                    INVALID_FETCH_SESSION_EPOCH otherwise). Its Topics
//	                    add partitions or update their fetch positions, its
//	                    ForgottenTopics remove them; every other partition
//	                    of the session is fetched from where it was. The
//	                    next request must carry n+1.
//
// An incremental response holds a session partition only if it has records,
// an error, a diverging epoch, or a high watermark, last stable offset or
// log start offset other than the session last sent. A partition that
// returned records moves to the end of the session's order, so that under
// a response size limit the others get their turn (as Kafka's broker does).
//
// Sessions live in the Server, not in a connection, as in Kafka: a client
// may reconnect and go on. At most Options.FetchSessionCacheSlots exist; a
// new one takes the slot of the least recently used session that has been
// idle for fetchSessionEvictAfter, and otherwise gets id 0 (the client then
// goes on with full fetches). Followers' fetches keep no session.

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	// DefaultFetchSessionCacheSlots is max.incremental.fetch.session.cache.slots.
	DefaultFetchSessionCacheSlots = 1000
	// fetchSessionEvictAfter is min.incremental.fetch.session.eviction.ms:
	// how long a session must have been unused before a new one may take
	// its slot.
	fetchSessionEvictAfter = 2 * time.Minute

	fetchEpochFinal   = -1
	fetchEpochInitial = 0
)

// sessionKey names a partition in a session: by topic ID from Fetch v13 on,
// by name before.
type sessionKey struct {
	id    [16]byte
	topic string
	part  int32
}

// sessionPart is a partition of a session: what the client last asked of it
// and what the broker last told it.
type sessionPart struct {
	key   sessionKey
	topic string // the name the request used (empty from v13: resolved per fetch)
	req   kmsg.FetchRequestTopicPartition

	// Last sent; -1 before the first response (so the first always
	// includes it) and after an error (so it is sent again once the
	// error clears).
	hw, lso, logStart int64
}

// fetchSession is one client's session.
type fetchSession struct {
	id        int32
	epoch     int32 // the epoch the next request must carry
	byTopicID bool  // created by a v13+ fetch: partitions keyed by topic ID
	parts     []*sessionPart
	index     map[sessionKey]*sessionPart
	lastUsed  time.Time
	inUse     bool // a fetch of it is being served
}

// fetchSessions is a server's session cache.
type fetchSessions struct {
	mu       sync.Mutex
	slots    int
	sessions map[int32]*fetchSession
}

func newFetchSessions(slots int) *fetchSessions {
	return &fetchSessions{slots: slots, sessions: map[int32]*fetchSession{}}
}

// fetchSessionUse is what serving one fetch does with the cache: it holds
// the session (nil: sessionless) from begin to finish.
type fetchSessionUse struct {
	fs    *fetchSessions
	sess  *fetchSession // the session served (incremental), or the one to create (full, epoch 0)
	isNew bool
}

func keyOf(topic string, id [16]byte, part int32, byID bool) sessionKey {
	if byID {
		return sessionKey{id: id, part: part}
	}
	return sessionKey{topic: topic, part: part}
}

// begin looks at a consumer's fetch request (v7+) before it is served. For
// an incremental fetch it applies the request to its session and replaces
// body.Topics with every partition of the session; it returns an error code
// for a session that is unknown or out of step. The caller must call finish
// on the use it returns (with the response) or release it.
func (fs *fetchSessions) begin(body *kmsg.FetchRequest, version int16, now time.Time) (*fetchSessionUse, int16) {
	u := &fetchSessionUse{fs: fs}
	if fs.slots <= 0 || version < 7 {
		return u, errNone
	}
	byID := version >= 13
	if body.SessionEpoch == fetchEpochFinal || body.SessionEpoch == fetchEpochInitial {
		if body.SessionID != 0 {
			fs.mu.Lock()
			delete(fs.sessions, body.SessionID)
			fs.mu.Unlock()
		}
		if body.SessionEpoch == fetchEpochFinal {
			return u, errNone
		}
		s := &fetchSession{byTopicID: byID, index: map[sessionKey]*sessionPart{}}
		for ti := range body.Topics {
			rt := &body.Topics[ti]
			for pi := range rt.Partitions {
				s.put(rt.Topic, rt.TopicID, rt.Partitions[pi])
			}
		}
		u.sess, u.isNew = s, true
		return u, errNone
	}

	fs.mu.Lock()
	s := fs.sessions[body.SessionID]
	switch {
	case s == nil:
		fs.mu.Unlock()
		return u, errFetchSessionIDNotFound
	case s.inUse || s.epoch != body.SessionEpoch || s.byTopicID != byID:
		fs.mu.Unlock()
		return u, errInvalidFetchSessionEpoch
	}
	s.inUse = true
	s.lastUsed = now
	s.epoch = nextFetchEpoch(s.epoch)
	fs.mu.Unlock()

	for ti := range body.Topics {
		rt := &body.Topics[ti]
		for pi := range rt.Partitions {
			s.put(rt.Topic, rt.TopicID, rt.Partitions[pi])
		}
	}
	for _, ft := range body.ForgottenTopics {
		for _, p := range ft.Partitions {
			s.forget(keyOf(ft.Topic, ft.TopicID, p, byID))
		}
	}
	if len(s.parts) == 0 {
		// Nothing left: Kafka drops the session and answers sessionless.
		fs.mu.Lock()
		delete(fs.sessions, s.id)
		fs.mu.Unlock()
		body.Topics = nil
		return u, errNone
	}
	u.sess = s
	body.Topics = s.request()
	return u, errNone
}

func nextFetchEpoch(e int32) int32 {
	if e == 1<<31-1 {
		return 1
	}
	return e + 1
}

// put adds a partition or updates what the client asks of it.
func (s *fetchSession) put(topic string, id [16]byte, rp kmsg.FetchRequestTopicPartition) {
	k := keyOf(topic, id, rp.Partition, s.byTopicID)
	if sp := s.index[k]; sp != nil {
		sp.req = rp
		return
	}
	sp := &sessionPart{key: k, topic: topic, req: rp, hw: -1, lso: -1, logStart: -1}
	s.index[k] = sp
	s.parts = append(s.parts, sp)
}

func (s *fetchSession) forget(k sessionKey) {
	sp := s.index[k]
	if sp == nil {
		return
	}
	delete(s.index, k)
	for i, p := range s.parts {
		if p == sp {
			s.parts = append(s.parts[:i], s.parts[i+1:]...)
			break
		}
	}
}

// request is the session's partitions as a full fetch's topics, in the
// session's order (a topic whose partitions are not adjacent appears more
// than once, as in Kafka's own responses).
func (s *fetchSession) request() []kmsg.FetchRequestTopic {
	var topics []kmsg.FetchRequestTopic
	for _, sp := range s.parts {
		n := len(topics)
		if n == 0 || topics[n-1].Topic != sp.topic || topics[n-1].TopicID != sp.key.id {
			topics = append(topics, kmsg.FetchRequestTopic{Topic: sp.topic, TopicID: sp.key.id})
			n++
		}
		topics[n-1].Partitions = append(topics[n-1].Partitions, sp.req)
	}
	return topics
}

// finish completes a session fetch: it sets the response's SessionID,
// records what each partition's answer said, and, for an incremental
// fetch, leaves out of resp and parts (in step with each other, as
// serveFetch built them) the partitions with nothing new, releasing what
// they held. A new session is created now, with the values the response
// carries.
func (u *fetchSessionUse) finish(resp *kmsg.FetchResponse, parts []fetchPart, now time.Time) []fetchPart {
	s := u.sess
	if s == nil {
		return parts
	}
	u.sess = nil
	i := 0
	kept := parts[:0]
	var moved []*sessionPart
	topics := resp.Topics[:0]
	for ti := range resp.Topics {
		t := resp.Topics[ti]
		ps := t.Partitions[:0]
		for _, rp := range t.Partitions {
			fp := parts[i]
			i++
			sp := s.index[keyOf(t.Topic, t.TopicID, rp.Partition, s.byTopicID)]
			if sp == nil { // cannot be: the request was made from the session
				ps, kept = append(ps, rp), append(kept, fp)
				continue
			}
			data := fp.span.Len() > 0
			respond := u.isNew || data || rp.ErrorCode != errNone ||
				rp.HighWatermark != sp.hw || rp.LastStableOffset != sp.lso || rp.LogStartOffset != sp.logStart ||
				rp.DivergingEpoch.Epoch >= 0
			if rp.ErrorCode != errNone {
				sp.hw, sp.lso, sp.logStart = -1, -1, -1
			} else {
				sp.hw, sp.lso, sp.logStart = rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset
			}
			if data && !u.isNew {
				moved = append(moved, sp)
			}
			if respond {
				ps, kept = append(ps, rp), append(kept, fp)
			} else {
				releaseSpan(&fp.span)
			}
		}
		if len(ps) > 0 {
			t.Partitions = ps
			topics = append(topics, t)
		}
	}
	resp.Topics = topics
	if len(moved) > 0 {
		for _, sp := range moved {
			s.forget(sp.key)
		}
		for _, sp := range moved {
			s.index[sp.key] = sp
			s.parts = append(s.parts, sp)
		}
	}

	fs := u.fs
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if !u.isNew {
		s.inUse = false
		s.lastUsed = now
		resp.SessionID = s.id
		return kept
	}
	if !fs.makeRoomLocked(now) {
		resp.SessionID = 0 // no slot: the client goes on with full fetches
		return kept
	}
	for {
		id := rand.Int32()
		if id != 0 && fs.sessions[id] == nil {
			s.id = id
			break
		}
	}
	s.epoch = nextFetchEpoch(fetchEpochInitial)
	s.lastUsed = now
	fs.sessions[s.id] = s
	resp.SessionID = s.id
	return kept
}

// release ends a session fetch that produced no response to finish (an
// error while serving it): the session is left as the next request
// expects it, epoch advanced.
func (u *fetchSessionUse) release() {
	if u.sess == nil || u.isNew {
		return
	}
	u.fs.mu.Lock()
	u.sess.inUse = false
	u.fs.mu.Unlock()
	u.sess = nil
}

// makeRoomLocked makes a slot for a new session if there is one to make:
// below the limit, or by evicting the least recently used session idle
// for fetchSessionEvictAfter.
func (fs *fetchSessions) makeRoomLocked(now time.Time) bool {
	if len(fs.sessions) < fs.slots {
		return true
	}
	var lru *fetchSession
	for _, s := range fs.sessions {
		if !s.inUse && (lru == nil || s.lastUsed.Before(lru.lastUsed)) {
			lru = s
		}
	}
	if lru == nil || now.Sub(lru.lastUsed) < fetchSessionEvictAfter {
		return false
	}
	delete(fs.sessions, lru.id)
	return true
}

// len is the number of sessions, for tests and stats.
func (fs *fetchSessions) len() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.sessions)
}
