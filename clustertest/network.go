package clustertest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ErrNoLinks reports a network fault asked of a cluster made without link
// proxies (Options.LinkProxies).
var ErrNoLinks = errors.New("clustertest: the cluster has no link proxies (Options.LinkProxies)")

// linkKey names a link: the dialing node, the dialed node, its listener.
type linkKey struct {
	from, to int32
	l        Listener
}

// startLinks makes a proxy for every ordered pair of nodes and each
// listener of the second, before any node starts.
func (c *Cluster) startLinks() error {
	c.links = map[linkKey]*Link{}
	for _, from := range c.nodes {
		for _, to := range c.nodes {
			if from == to {
				continue
			}
			for _, l := range []Listener{KafkaListener, ControllerListener} {
				target := to.listen
				if l == ControllerListener {
					target = to.ctrlListen
				}
				k, err := newLink(c.opts.Host, from.id, to.id, l, target)
				if err != nil {
					c.closeLinks()
					return err
				}
				c.links[linkKey{from.id, to.id, l}] = k
			}
		}
	}
	return nil
}

// closeLinks closes every proxy and its connections.
func (c *Cluster) closeLinks() {
	for _, k := range c.links {
		k.close()
	}
}

// dialMap is node n's --dial-map value: each other node's addresses
// mapped to the proxies of n's links to them.
func (c *Cluster) dialMap(n *Node) string {
	var pairs []string
	for _, to := range c.nodes {
		if to == n {
			continue
		}
		pairs = append(pairs,
			to.addr+"="+c.links[linkKey{n.id, to.id, KafkaListener}].addr,
			to.ctrlAddr+"="+c.links[linkKey{n.id, to.id, ControllerListener}].addr)
	}
	return strings.Join(pairs, ",")
}

// Links are the cluster's link proxies (none without Options.LinkProxies),
// ordered by From, To and Listener.
func (c *Cluster) Links() []*Link {
	out := make([]*Link, 0, len(c.links))
	for _, k := range c.links {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b *Link) int {
		switch {
		case a.From != b.From:
			return int(a.From - b.From)
		case a.To != b.To:
			return int(a.To - b.To)
		}
		return int(a.Listener - b.Listener)
	})
	return out
}

// Link returns the proxy of the connections node from opens to node to's
// listener l, nil if there is none.
func (c *Cluster) Link(from, to int32, l Listener) *Link {
	return c.links[linkKey{from, to, l}]
}

// between calls f with each link between nodes a and b, both ways, and
// the direction on it in which bytes go from a to b.
func (c *Cluster) between(a, b int32, f func(k *Link, aToB Direction)) {
	for _, l := range []Listener{KafkaListener, ControllerListener} {
		if k := c.links[linkKey{a, b, l}]; k != nil {
			f(k, Forward)
		}
		if k := c.links[linkKey{b, a, l}]; k != nil {
			f(k, Backward)
		}
	}
}

// checkNodes fails without link proxies or with an id that is no node's.
func (c *Cluster) checkNodes(ids ...int32) error {
	if c.links == nil {
		return ErrNoLinks
	}
	for _, id := range ids {
		if c.Node(id) == nil {
			return fmt.Errorf("clustertest: no node %d", id)
		}
	}
	return nil
}

// Partition splits the nodes into groups that cannot reach each other:
// every link between nodes of different groups is cut both ways, on every
// connection, open or new. Nodes named in no group form one more group.
// Links inside a group are left as they are. Clients still reach every
// node: the partition is between the nodes.
func (c *Cluster) Partition(groups ...[]int32) error {
	group := map[int32]int{}
	for g, ids := range groups {
		if err := c.checkNodes(ids...); err != nil {
			return err
		}
		for _, id := range ids {
			if _, dup := group[id]; dup {
				return fmt.Errorf("clustertest: partition: node %d is in two groups", id)
			}
			group[id] = g
		}
	}
	if err := c.checkNodes(); err != nil {
		return err
	}
	for _, n := range c.nodes {
		if _, ok := group[n.id]; !ok {
			group[n.id] = len(groups)
		}
	}
	for _, k := range c.links {
		if group[k.From] != group[k.To] {
			k.Cut()
		}
	}
	return nil
}

// Isolate cuts each node named from every other node, both ways: from the
// rest of the cluster and from each other.
func (c *Cluster) Isolate(ids ...int32) error {
	groups := make([][]int32, len(ids))
	for i, id := range ids {
		groups[i] = []int32{id}
	}
	return c.Partition(groups...)
}

// BlockOneWay stops the bytes node from sends to node to, on every
// connection between them - the requests of the ones from opened, the
// answers on the ones to opened - while the bytes to sends from flow: a
// one-way partition. to may act on what it received before (or on
// answers it never delivers); from hears what to says but is never heard.
func (c *Cluster) BlockOneWay(from, to int32) error {
	if err := c.checkNodes(from, to); err != nil {
		return err
	}
	if from == to {
		return fmt.Errorf("clustertest: block %d→%d: a node has no link to itself", from, to)
	}
	c.between(from, to, func(k *Link, d Direction) { k.Block(d) })
	return nil
}

// Slow delays every byte between node id and every other node, both
// ways, by delay (see Link.Delay); 0 ends it.
func (c *Cluster) Slow(id int32, delay time.Duration) error {
	if err := c.checkNodes(id); err != nil {
		return err
	}
	for _, k := range c.links {
		if k.From == id || k.To == id {
			k.Delay(delay)
		}
	}
	return nil
}

// HealNetwork heals every link: no cut, no block, no delay. Bytes held
// during a partition are delivered.
func (c *Cluster) HealNetwork() error {
	if err := c.checkNodes(); err != nil {
		return err
	}
	for _, k := range c.links {
		k.Heal()
	}
	return nil
}

// NetworkHealthy reports whether every link passes bytes both ways without
// delay (true without link proxies).
func (c *Cluster) NetworkHealthy() bool {
	for _, k := range c.links {
		if !k.Healthy() {
			return false
		}
	}
	return true
}
