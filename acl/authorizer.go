package acl

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/spoolmq/spool/internal/crcfile"
	"github.com/spoolmq/spool/internal/vfs"
)

// Store keeps an Authorizer's bindings durably: Save replaces them all,
// and must be durable when it returns.
type Store interface {
	Save([]Binding) error
}

// VersionedStore is a Store shared by several Authorizers, each holding a
// copy of the bindings: a cluster's nodes, whose ACLs live in the
// cluster's metadata log. Every saved list has a version, one more than
// the list it was made from; an Authorizer whose Store is a VersionedStore
// saves with SaveAt, naming the version its bindings are at, and the
// store refuses the change if another was saved since. The Authorizer
// then learns the newer bindings through Sync, and the change can be
// made again.
type VersionedStore interface {
	Store
	// SaveAt replaces the bindings of version base with bs, as version
	// base+1, or fails if the stored bindings are no longer at base.
	SaveAt(bs []Binding, base int64) error
}

// Config configures an Authorizer.
type Config struct {
	// SuperUsers are principals allowed everything (super.users), e.g.
	// "User:admin"; a cluster's nodes must be among them when they
	// authenticate to each other (mutual TLS).
	SuperUsers []string
	// Bindings are the ACLs to start with (a Store's, as loaded).
	Bindings []Binding
	// Store keeps changes; nil: in memory only.
	Store Store
}

// Authorizer decides operations from its bindings. Safe for concurrent
// use; Authorize takes a read lock only.
type Authorizer struct {
	super map[string]bool

	mu       sync.RWMutex
	bindings []Binding // sorted by resource type and name
	index    index     // bindings, for Authorize
	store    Store
	storeMu  sync.Mutex // one Save at a time, in order
	version  int64      // of the bindings, with a VersionedStore; under storeMu
}

// New returns an Authorizer. Invalid bindings in cfg are an error.
func New(cfg Config) (*Authorizer, error) {
	a := &Authorizer{super: map[string]bool{}, store: cfg.Store}
	for _, p := range cfg.SuperUsers {
		p = strings.TrimSpace(p)
		if !validPrincipal(p) {
			return nil, fmt.Errorf("%w: super user %q (want Type:name, e.g. User:admin)", ErrInvalid, p)
		}
		a.super[p] = true
	}
	for _, b := range cfg.Bindings {
		if err := b.Validate(); err != nil {
			return nil, err
		}
		a.insert(b)
	}
	a.index = newIndex(a.bindings)
	return a, nil
}

// rkey names a resource.
type rkey struct {
	rt   ResourceType
	name string
}

// index is the bindings as Authorize looks them up: literal ones by
// resource, prefixed ones by resource type. Rebuilt on every change.
type index struct {
	literal  map[rkey][]Binding
	prefixed map[ResourceType][]Binding
}

func newIndex(bs []Binding) index {
	ix := index{literal: map[rkey][]Binding{}, prefixed: map[ResourceType][]Binding{}}
	for _, b := range bs {
		if b.Pattern == PatternPrefixed {
			ix.prefixed[b.ResourceType] = append(ix.prefixed[b.ResourceType], b)
		} else {
			k := rkey{b.ResourceType, b.Name}
			ix.literal[k] = append(ix.literal[k], b)
		}
	}
	return ix
}

// ParseSuperUsers splits Kafka's super.users list, "User:a;User:b".
func ParseSuperUsers(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ";") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func compare(a, b Binding) int {
	if a.ResourceType != b.ResourceType {
		return int(a.ResourceType) - int(b.ResourceType)
	}
	if c := strings.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	if a.Pattern != b.Pattern {
		return int(a.Pattern) - int(b.Pattern)
	}
	if c := strings.Compare(a.Principal, b.Principal); c != 0 {
		return c
	}
	if c := strings.Compare(a.Host, b.Host); c != 0 {
		return c
	}
	if a.Operation != b.Operation {
		return int(a.Operation) - int(b.Operation)
	}
	return int(a.Permission) - int(b.Permission)
}

// insert adds b if absent; false if it was there. Called before the
// Authorizer is shared.
func (a *Authorizer) insert(b Binding) bool {
	var added bool
	a.bindings, added = insertInto(a.bindings, b)
	return added
}

// insertInto adds b to the sorted list if absent.
func insertInto(list []Binding, b Binding) ([]Binding, bool) {
	i, found := slices.BinarySearchFunc(list, b, compare)
	if found {
		return list, false
	}
	return slices.Insert(list, i, b), true
}

// IsSuperUser reports whether principal is allowed everything.
func (a *Authorizer) IsSuperUser(principal string) bool { return a.super[principal] }

// Authorize decides whether principal, connected from host (an IP
// address), may perform op on the resource of type rt named name.
func (a *Authorizer) Authorize(principal, host string, op Operation, rt ResourceType, name string) bool {
	if a.super[principal] {
		return true
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	allowed := false
	check := func(b Binding) bool { // false: denied, stop
		if b.Principal != principal && b.Principal != "User:*" {
			return true
		}
		if b.Host != host && b.Host != Wildcard {
			return true
		}
		if !implies(b.Operation, op, b.Permission) {
			return true
		}
		if b.Permission == Deny {
			return false
		}
		allowed = true
		return true
	}
	// The bindings that can apply: literal name, literal "*", and every
	// prefixed one that is a prefix of name.
	for _, b := range a.index.literal[rkey{rt, name}] {
		if !check(b) {
			return false
		}
	}
	if name != Wildcard {
		for _, b := range a.index.literal[rkey{rt, Wildcard}] {
			if !check(b) {
				return false
			}
		}
	}
	for _, b := range a.index.prefixed[rt] {
		if strings.HasPrefix(name, b.Name) && !check(b) {
			return false
		}
	}
	return allowed
}

// Create adds bindings (CreateAcls): each invalid one gets its error and
// is not added; an identical one already there succeeds. The valid ones are
// saved, then take effect; if saving fails, none is added and every valid
// one gets that error.
func (a *Authorizer) Create(bs []Binding) []error {
	errs := make([]error, len(bs))
	a.storeMu.Lock() // one change at a time: next is built from the current list
	defer a.storeMu.Unlock()
	a.mu.RLock()
	next := slices.Clone(a.bindings)
	a.mu.RUnlock()
	changed := false
	for i, b := range bs {
		if errs[i] = b.Validate(); errs[i] == nil {
			var added bool
			next, added = insertInto(next, b)
			changed = changed || added
		}
	}
	if !changed {
		return errs
	}
	if err := a.save(next); err != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return errs
	}
	a.publish(next)
	return errs
}

// publish makes next the bindings Authorize decides by.
func (a *Authorizer) publish(next []Binding) {
	ix := newIndex(next)
	a.mu.Lock()
	a.bindings, a.index = next, ix
	a.mu.Unlock()
}

// Delete removes the bindings each filter matches (DeleteAcls) and returns
// them per filter. An invalid filter gets its error and removes nothing;
// the others' removals are saved, then take effect (a failed save removes
// nothing and is returned as the error).
func (a *Authorizer) Delete(fs []Filter) ([][]Binding, []error, error) {
	removed := make([][]Binding, len(fs))
	errs := make([]error, len(fs))
	a.storeMu.Lock()
	defer a.storeMu.Unlock()
	a.mu.RLock()
	before := a.bindings
	a.mu.RUnlock()
	next := slices.Clone(before)
	for i, f := range fs {
		if errs[i] = f.Validate(); errs[i] != nil {
			continue
		}
		for _, b := range before {
			if f.Matches(b) {
				removed[i] = append(removed[i], b)
			}
		}
		next = slices.DeleteFunc(next, f.Matches)
	}
	if len(next) == len(before) {
		return removed, errs, nil
	}
	if err := a.save(next); err != nil {
		return make([][]Binding, len(fs)), errs, err
	}
	a.publish(next)
	return removed, errs, nil
}

// Describe returns the bindings the filter matches (DescribeAcls).
func (a *Authorizer) Describe(f Filter) ([]Binding, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	var out []Binding
	for _, b := range a.bindings {
		if f.Matches(b) {
			out = append(out, b)
		}
	}
	return out, nil
}

// Len is the number of bindings.
func (a *Authorizer) Len() int {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return len(a.bindings)
}

// save stores bs, the bindings after a change; called with storeMu.
func (a *Authorizer) save(bs []Binding) error {
	if a.store == nil {
		return nil
	}
	if vs, ok := a.store.(VersionedStore); ok {
		if err := vs.SaveAt(slices.Clone(bs), a.version); err != nil {
			return err
		}
		a.version++
		return nil
	}
	return a.store.Save(slices.Clone(bs))
}

// SetStore makes s keep the Authorizer's changes from now on (package
// transport gives a cluster node's Authorizer the cluster's metadata
// log).
func (a *Authorizer) SetStore(s Store) {
	a.storeMu.Lock()
	a.store = s
	a.storeMu.Unlock()
}

// Sync installs bindings saved elsewhere as version: another node's
// change, read from the VersionedStore. Bindings at a version the
// Authorizer has reached already change nothing. It waits for a change in
// progress to finish. Invalid bindings are an error and change nothing.
func (a *Authorizer) Sync(bs []Binding, version int64) error {
	var next []Binding
	for _, b := range bs {
		if err := b.Validate(); err != nil {
			return err
		}
		next, _ = insertInto(next, b)
	}
	a.storeMu.Lock()
	defer a.storeMu.Unlock()
	if version <= a.version {
		return nil
	}
	a.publish(next)
	a.version = version
	return nil
}

// Version is the version of the bindings (see VersionedStore): 0 until a
// VersionedStore saves or Sync installs some.
func (a *Authorizer) Version() int64 {
	a.storeMu.Lock()
	defer a.storeMu.Unlock()
	return a.version
}

// FileStore keeps bindings in one file, replaced atomically (written
// aside, synced, renamed over, directory synced):
//
//	spool-acls 1
//	[{"ResourceType":2,"Name":"orders",...}, ...]
//	crc32c 5e3a9b1c
//
// The last line is the CRC-32C of the lines before it.
type FileStore struct {
	path string
}

// ErrBadFile means the ACL file is damaged: its CRC does not match or it
// does not parse. It is never guessed at - an authorizer that lost its
// DENY bindings would let in what they keep out.
var ErrBadFile = errors.New("acl: ACL file is damaged")

// aclsHeader is the first line of a FileStore's file.
const aclsHeader = "spool-acls 1"

// OpenFile returns the store at path and the bindings it holds (none if
// the file does not exist yet).
func OpenFile(path string) (*FileStore, []Binding, error) {
	data, err := vfs.ReadFile(vfs.Default, path)
	if errors.Is(err, os.ErrNotExist) {
		return &FileStore{path: path}, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	bs, err := decodeFile(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v (restore it from a backup, or delete it and create the ACLs again)", ErrBadFile, path, err)
	}
	return &FileStore{path: path}, bs, nil
}

func decodeFile(data []byte) ([]Binding, error) {
	js, err := crcfile.Decode(data, aclsHeader)
	if err != nil {
		return nil, err
	}
	return Unmarshal(js)
}

// Marshal encodes bindings as JSON: the FileStore's and a cluster's
// metadata log's form, [{"ResourceType":2,"Name":"orders",...}, ...].
func Marshal(bs []Binding) ([]byte, error) {
	if bs == nil {
		bs = []Binding{}
	}
	return json.Marshal(bs)
}

// Unmarshal decodes what Marshal encoded; an invalid binding is an error.
func Unmarshal(data []byte) ([]Binding, error) {
	var bs []Binding
	if err := json.Unmarshal(data, &bs); err != nil {
		return nil, err
	}
	for _, b := range bs {
		if err := b.Validate(); err != nil {
			return nil, err
		}
	}
	return bs, nil
}

// Save implements Store.
func (s *FileStore) Save(bs []Binding) error {
	js, err := Marshal(bs)
	if err != nil {
		return err
	}
	return vfs.WriteFileAtomic(vfs.Default, s.path, crcfile.Encode(aclsHeader, js))
}

// AuthorizeAny reports whether principal, from host, may perform op on
// some resource of type rt (Kafka's authorizeByResourceType, KIP-679): a
// super user; or some ALLOW binding of the type grants op to it, and no
// DENY of op binds the whole type for it (literal "*", or the empty
// prefix).
func (a *Authorizer) AuthorizeAny(principal, host string, op Operation, rt ResourceType) bool {
	if a.super[principal] {
		return true
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	applies := func(b Binding) bool {
		return b.ResourceType == rt && (b.Principal == principal || b.Principal == "User:*") &&
			(b.Host == host || b.Host == Wildcard) && implies(b.Operation, op, b.Permission)
	}
	allowed := false
	for _, b := range a.bindings {
		if !applies(b) {
			continue
		}
		if b.Permission == Deny && ((b.Pattern == PatternLiteral && b.Name == Wildcard) || (b.Pattern == PatternPrefixed && b.Name == "")) {
			return false
		}
		if b.Permission == Allow {
			allowed = true
		}
	}
	return allowed
}
