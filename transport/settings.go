package transport

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spoolmq/spool"
	"github.com/spoolmq/spool/acl"
	"github.com/spoolmq/spool/controller"
	"github.com/spoolmq/spool/quota"
)

// A cluster node's ACLs, client quotas and SCRAM credentials (those set
// over the protocol) are the cluster's: they live in the metadata log as
// settings documents (controller.SettingsACLs, SettingsQuotas,
// SettingsSCRAM), and every node's Authorizer, quota Manager and SCRAMFile
// hold a copy.
//
//   - A change (CreateAcls, DeleteAcls, AlterClientQuotas,
//     AlterUserScramCredentials) is made on the node that received it,
//     from the version of the document its copy is at, and saved through
//     the active controller (Broker.AlterSettings), which refuses it if
//     another change was saved since. The node then takes the newer
//     document and makes the change again (retryStale).
//   - Every node follows the metadata log (clusterSettings.follow) and
//     installs each new version (Authorizer.Sync, Manager.Sync,
//     Server.syncSCRAM). A node serves Kafka clients only once it has
//     caught up with the log, with the cluster's settings installed.
//
// So an ACL created on one node holds on every node once they have applied
// the entry: the same moment the cluster's other metadata changes reach
// them.

// clusterSettings keeps a cluster node's Authorizer, quota Manager and
// SCRAM credentials in step with the metadata log.
type clusterSettings struct {
	q   *controller.Quorum
	a   *acl.Authorizer // nil: no authorizer
	m   *quota.Manager  // nil: no quotas
	s   *Server         // its SCRAM credentials, with Options.SCRAMFile
	log *slog.Logger
}

// settingsStore saves a settings document through the cluster's active
// controller.
type settingsStore struct {
	b    *spool.Broker
	kind controller.SettingsKind
}

// settingsSaveTimeout bounds one save through the controller, and
// settingsRetryTime a change's saves together.
const (
	settingsSaveTimeout = 30 * time.Second
	settingsRetryTime   = 30 * time.Second
)

// saveAt saves data as version base+1 of the document. The change has
// an id of its own, so that a retry after an answer lost in a controller
// failover is recognised as done rather than refused as stale.
func (s settingsStore) saveAt(data []byte, base int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), settingsSaveTimeout)
	defer cancel()
	var id [12]byte
	_, _ = rand.Read(id[:])
	return s.b.AlterSettings(ctx, controller.SettingsChange{Kind: s.kind, BaseVersion: base, Data: data, ID: hex.EncodeToString(id[:])})
}

// validateSettings is what the controller checks a settings document
// with: each node reads it the same way.
func validateSettings(kind controller.SettingsKind, data []byte) error {
	var err error
	switch kind {
	case controller.SettingsACLs:
		_, err = acl.Unmarshal(data)
	case controller.SettingsQuotas:
		_, err = quota.Unmarshal(data)
	case controller.SettingsSCRAM:
		_, err = decodeSCRAM(data)
	default:
		err = fmt.Errorf("unknown settings kind %q", kind)
	}
	return err
}

var errUnversionedSave = errors.New("transport: a cluster's settings are saved with a version")

// aclStore is a cluster node's acl.VersionedStore.
type aclStore struct{ settingsStore }

func (aclStore) Save([]acl.Binding) error { return errUnversionedSave }

func (s aclStore) SaveAt(bs []acl.Binding, base int64) error {
	data, err := acl.Marshal(bs)
	if err != nil {
		return err
	}
	return s.saveAt(data, base)
}

// quotaStore is a cluster node's quota.VersionedStore.
type quotaStore struct{ settingsStore }

func (quotaStore) Save(map[quota.Entity]map[quota.Key]float64) error { return errUnversionedSave }

func (s quotaStore) SaveAt(qs map[quota.Entity]map[quota.Key]float64, base int64) error {
	data, err := quota.Marshal(qs)
	if err != nil {
		return err
	}
	return s.saveAt(data, base)
}

// sync installs the image's documents newer than the copies held (none on
// a standalone broker: cs nil).
func (cs *clusterSettings) sync() {
	if cs == nil {
		return
	}
	im := cs.q.Image()
	if cs.a != nil {
		if st := im.Settings(controller.SettingsACLs); st.Version > cs.a.Version() {
			bs, err := acl.Unmarshal(st.Data)
			if err == nil {
				err = cs.a.Sync(bs, st.Version)
			}
			if err != nil {
				// The controller checked the document with the same
				// decoder before committing it, so only a node of another
				// version can get here. Keep the ACLs held and say so.
				cs.log.Error("the cluster's ACLs do not decode; keeping the previous ones", "version", st.Version, "err", err)
			}
		}
	}
	cs.syncSCRAM(im)
	if cs.m != nil {
		if st := im.Settings(controller.SettingsQuotas); st.Version > cs.m.Version() {
			qs, err := quota.Unmarshal(st.Data)
			if err == nil {
				err = cs.m.Sync(qs, st.Version)
			}
			if err != nil {
				cs.log.Error("the cluster's client quotas do not decode; keeping the previous ones", "version", st.Version, "err", err)
			}
		}
	}
}

// syncSCRAM is sync's part for SCRAM credentials.
func (cs *clusterSettings) syncSCRAM(im *controller.Image) {
	if cs.s == nil || cs.s.opts.SCRAMFile == nil {
		return
	}
	st := im.Settings(controller.SettingsSCRAM)
	if st.Version <= cs.s.scramVersion() {
		return
	}
	creds, err := decodeSCRAM(st.Data)
	if err == nil {
		err = cs.s.syncSCRAM(creds, st.Version)
	}
	if err != nil {
		cs.log.Error("the cluster's SCRAM credentials do not decode; keeping the previous ones", "version", st.Version, "err", err)
	}
}

// follow syncs on every change of the image until stop is closed.
func (cs *clusterSettings) follow(stop <-chan struct{}) {
	for {
		changed := cs.q.Changed()
		cs.sync()
		select {
		case <-changed:
		case <-stop:
			return
		}
	}
}

// retryStale makes a change to a settings document (change returns the
// save's error, nil or not) until the cluster stops refusing it as made
// from an old version: after each refusal it waits for this node to apply
// the newer document (version says which the copy is at), then tries
// again, for up to settingsRetryTime (changes streaming in through other
// nodes can refuse one several times in a row). On a standalone broker
// (cs nil) it makes the change once.
func (cs *clusterSettings) retryStale(ctx context.Context, version func() int64, change func() error) {
	ctx, cancel := context.WithTimeout(ctx, settingsRetryTime)
	defer cancel()
	for {
		before := version()
		err := change()
		if cs == nil || !errors.Is(err, controller.ErrConfigChanged) || ctx.Err() != nil {
			return
		}
		for version() == before {
			changed := cs.q.Changed()
			cs.sync()
			if version() != before {
				break
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
		}
	}
}

// firstStale is the first error of errs that refuses a change as made
// from an old version, or nil.
func firstStale(errs []error) error {
	for _, err := range errs {
		if errors.Is(err, controller.ErrConfigChanged) {
			return err
		}
	}
	return nil
}

// peerPrincipal is the principal a node presents to the others: the one
// its peer certificate maps to.
func peerPrincipal(cfg *tls.Config, rules principalMapper) (string, error) {
	var cert *tls.Certificate
	switch {
	case len(cfg.Certificates) > 0:
		cert = &cfg.Certificates[0]
	case cfg.GetClientCertificate != nil:
		c, err := cfg.GetClientCertificate(&tls.CertificateRequestInfo{})
		if err != nil {
			return "", err
		}
		cert = c
	}
	if cert == nil || len(cert.Certificate) == 0 {
		return "", fmt.Errorf("PeerTLS presents no certificate")
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return "", err
	}
	name, err := rules.apply(distinguishedName(leaf))
	if err != nil {
		return "", err
	}
	return "User:" + name, nil
}
