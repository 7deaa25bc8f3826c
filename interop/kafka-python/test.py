#!/usr/bin/python3
"""kafka-python (Debian's python3-kafka 2.0.2) against spool serve.

KafkaAdminClient creates the topic; producers with kafka-python's protocol
inference (acks=all, gzip), pinned to Kafka 0.10.1 (Produce v2: message
format v1, acks=1) and pinned to 0.8.2 (Produce v0: message format v0);
consumers pinned to 0.9 (Fetch v1: message format v0) and to 0.10.1 (Fetch
v3: message format v1) reading every partition from the start, and a
consumer group with committed offsets. Every
acknowledged record must be read exactly once per reader, at its
acknowledged offset, in order per partition. Then, on a server that requires
SASL, PLAIN and SCRAM-SHA-256 produce and consume, and a wrong password is
refused.

Usage: /usr/bin/python3 interop/kafka-python/test.py (needs Debian's
python3-kafka). It starts spool serve itself: $SPOOL_BIN, or a binary built
with go build. Exits non-zero on any mismatch, printing the server's log.
"""

import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError, NoBrokersAvailable

logging.basicConfig(level=logging.CRITICAL)

WORK = tempfile.mkdtemp(prefix="spool-kafka-python-")
INTEROP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Server:
    """spool serve on a fresh data directory, its stderr kept."""

    def __init__(self, bin_path, *args):
        self.data = tempfile.mkdtemp(dir=WORK, prefix="data-")
        self.log_path = os.path.join(WORK, "serve-%d.log" % len(os.listdir(WORK)))
        self.log = open(self.log_path, "w+")
        self.proc = subprocess.Popen(
            [bin_path, "serve", "--data", self.data, "--listen", "127.0.0.1:0", "--log-level", "debug", *args],
            stdout=subprocess.DEVNULL, stderr=self.log)
        self.addr = None
        for _ in range(300):
            with open(self.log_path) as f:
                m = re.search(r"^spool: serving on (\S+)$", f.read(), re.M)
            if m:
                self.addr = m.group(1)
                return
            if self.proc.poll() is not None:
                raise RuntimeError("spool serve exited before listening")
            time.sleep(0.1)
        raise RuntimeError("spool serve did not report its address")

    def stop(self):
        """SIGTERM, which must end it with status 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            code = self.proc.wait(timeout=30)
            if code != 0:
                raise RuntimeError("spool serve exited %d after SIGTERM" % code)

    def output(self):
        with open(self.log_path) as f:
            return f.read()


class Ledger:
    """What was acknowledged where, and what each reader read."""

    def __init__(self):
        self.produced = {}  # (partition, offset) -> value
        self.values = set()

    def acked(self, md, value):
        key = (md.partition, md.offset)
        check(value not in self.values, "value %r produced twice by the test" % value)
        check(key not in self.produced, "offset %r acknowledged twice" % (key,))
        self.values.add(value)
        self.produced[key] = value

    def check_read(self, name, records):
        """records: (partition, offset, value) in the order one reader got
        them. Exactly once, each at its acknowledged offset, in order."""
        seen = {}
        last = {}
        for p, off, value in records:
            want = self.produced.get((p, off))
            check(want is not None, "%s read %r at %d-%d, never acknowledged there" % (name, value, p, off))
            check(want == value, "%s read %r at %d-%d, %r was acknowledged there" % (name, value, p, off, want))
            check((p, off) not in seen, "%s read %d-%d twice" % (name, p, off))
            check(off > last.get(p, -1), "%s read %d-%d after %d" % (name, p, off, last.get(p, -1)))
            seen[(p, off)] = True
            last[p] = off
        missing = set(self.produced) - set(seen)
        check(not missing, "%s missed %d records, e.g. %r" % (name, len(missing), sorted(missing)[:5]))
        print("kafka-python: %s read all %d records exactly once, in order" % (name, len(seen)))


def check(ok, what):
    if not ok:
        raise AssertionError(what)


def produce(ledger, addr, prefix, n, **cfg):
    p = KafkaProducer(bootstrap_servers=addr, client_id="py-" + prefix, **cfg)
    futures = []
    for i in range(n):
        value = "%s-%d" % (prefix, i)
        futures.append((value, p.send(TOPIC, key=b"k%d" % (i % 17), value=value.encode(),
                                       timestamp_ms=1_700_000_000_000 + i)))
    p.flush(timeout=30)
    for value, f in futures:
        ledger.acked(f.get(timeout=30), value)
    p.close(timeout=10)


def read_all(consumer, want, deadline=60):
    """Polls until want records came and then half a second more."""
    out = []
    end = time.time() + deadline
    quiet_until = None
    while time.time() < end:
        batch = consumer.poll(timeout_ms=200)
        for tp, msgs in sorted(batch.items(), key=lambda kv: kv[0].partition):
            for m in msgs:
                out.append((m.partition, m.offset, m.value.decode()))
        if len(out) >= want:
            if quiet_until is None:
                quiet_until = time.time() + 0.5
            elif time.time() > quiet_until:
                break
    return out


TOPIC = "py-test"
PARTITIONS = 3


def main(bin_path):
    s = Server(bin_path)
    servers = [s]
    try:
        print("kafka-python %s: spool serve on %s" % (__import__("kafka").__version__, s.addr))
        admin = KafkaAdminClient(bootstrap_servers=s.addr, client_id="py-admin")
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
        check(TOPIC in admin.list_topics(), "list_topics lacks %s" % TOPIC)
        desc = admin.describe_topics([TOPIC])
        check(len(desc[0]["partitions"]) == PARTITIONS, "describe_topics: %r" % desc)

        ledger = Ledger()
        produce(ledger, s.addr, "inferred", 600, acks="all", compression_type="gzip", linger_ms=5)
        produce(ledger, s.addr, "v0.10.1", 200, acks=1, api_version=(0, 10, 1))
        produce(ledger, s.addr, "v0.8.2", 200, acks=1, api_version=(0, 8, 2))
        print("kafka-python: %d records acknowledged" % len(ledger.produced))

        # Plain consumers pinned to 0.9 (Fetch v1: message format v0) and
        # 0.10.1 (Fetch v3: message format v1).
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        for version in ((0, 9), (0, 10, 1)):
            c = KafkaConsumer(bootstrap_servers=s.addr, client_id="py-old-consumer", api_version=version,
                              enable_auto_commit=False, consumer_timeout_ms=1000)
            c.assign(tps)
            c.seek_to_beginning(*tps)
            ledger.check_read("consumer pinned to %s" % ".".join(map(str, version)), read_all(c, len(ledger.produced)))
            c.close()

        # A group (protocol inferred), committing what it read.
        g = KafkaConsumer(TOPIC, bootstrap_servers=s.addr, client_id="py-group-member", group_id="py-group",
                          auto_offset_reset="earliest", enable_auto_commit=False)
        got = read_all(g, len(ledger.produced))
        ledger.check_read("group member", got)
        g.commit()
        ends = g.end_offsets(tps)
        for tp in tps:
            committed = g.committed(tp)
            check(committed == ends[tp], "group committed %r for %r, end offset %r" % (committed, tp, ends[tp]))
        g.close()
        offsets = admin.list_consumer_group_offsets("py-group")
        check(sum(o.offset for o in offsets.values()) == len(ledger.produced),
              "list_consumer_group_offsets: %r" % offsets)
        admin.close()
        s.stop()

        # SASL: PLAIN and SCRAM-SHA-256; a wrong password is refused.
        s = Server(bin_path, "--sasl-plain", "py:secret", "--sasl-scram-sha-256", "py:secret")
        servers.append(s)
        for mech in ("PLAIN", "SCRAM-SHA-256"):
            auth = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism=mech,
                        sasl_plain_username="py", sasl_plain_password="secret")
            admin = KafkaAdminClient(bootstrap_servers=s.addr, client_id="py-admin-" + mech, **auth)
            topic = "py-sasl-" + mech.lower()
            admin.create_topics([NewTopic(topic, 1, 1)])
            admin.close()
            p = KafkaProducer(bootstrap_servers=s.addr, acks="all", **auth)
            md = p.send(topic, b"over " + mech.encode()).get(timeout=30)
            p.close()
            c = KafkaConsumer(topic, bootstrap_servers=s.addr, auto_offset_reset="earliest",
                              consumer_timeout_ms=5000, **auth)
            vals = [(m.offset, m.value) for m in c]
            c.close()
            check(vals == [(md.offset, b"over " + mech.encode())], "%s: read %r" % (mech, vals))
            print("kafka-python: SASL %s produce and consume" % mech)
        try:
            KafkaProducer(bootstrap_servers=s.addr, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                          sasl_plain_username="py", sasl_plain_password="wrong", request_timeout_ms=5000,
                          api_version_auto_timeout_ms=5000)
            check(False, "a wrong password was accepted")
        except (NoBrokersAvailable, KafkaError) as e:
            print("kafka-python: wrong password refused (%s)" % type(e).__name__)
        s.stop()
        print("kafka-python: ok")
    except BaseException:
        for srv in servers:
            if srv.proc.poll() is None:
                srv.proc.kill()
            print("kafka-python: FAILED; spool serve's stderr:\n" + "".join(
                "    " + line for line in srv.output().splitlines(True)[-200:]), file=sys.stderr)
        raise


if __name__ == "__main__":
    bin_path = os.environ.get("SPOOL_BIN")
    if not bin_path:
        bin_path = os.path.join(WORK, "spool")
        subprocess.check_call(["go", "build", "-o", bin_path, "github.com/spoolmq/spool/cmd/spool"], cwd=INTEROP)
    timer = threading.Timer(180, lambda: os.kill(os.getpid(), signal.SIGTERM))
    timer.daemon = True
    timer.start()
    try:
        main(bin_path)
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
