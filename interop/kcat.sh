#!/usr/bin/env bash
# kcat (librdkafka) against spool serve: produce with -P (plain, then
# idempotent with lz4), consume with -C -o beginning -e, consume again in a
# group with -G, and compare what was consumed with what was produced.
#
# Usage: interop/kcat.sh   (needs kcat: apt-get install kcat; and go, unless
# SPOOL_BIN names a spool binary). Exits non-zero on any mismatch, printing
# the server's log.
set -euo pipefail
cd "$(dirname "$0")"

command -v kcat >/dev/null || { echo "kcat.sh: kcat is not installed (apt-get install kcat)"; exit 1; }

work=$(mktemp -d)
server_pid=
cleanup() {
	status=$?
	if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
		kill -TERM "$server_pid"
		wait "$server_pid" || { echo "kcat.sh: spool serve exited $? after SIGTERM"; status=1; }
	fi
	if [ "$status" != 0 ]; then
		echo "kcat.sh: FAILED; spool serve's stderr:"
		sed 's/^/    /' "$work/serve.log" 2>/dev/null | tail -n 200 || true
	fi
	rm -rf "$work"
	exit "$status"
}
trap cleanup EXIT

fail() { echo "kcat.sh: FAIL: $*"; exit 1; }

bin=${SPOOL_BIN:-}
if [ -z "$bin" ]; then
	bin=$work/spool
	go build -o "$bin" github.com/spoolmq/spool/cmd/spool
fi

topic=kcat-test
partitions=3
n=1000

# kcat cannot create topics: create it on the data directory first.
"$bin" topics create --data "$work/data" --topic "$topic" --partitions "$partitions" >/dev/null

# start_server ARGS...: start spool serve on $work/data; sets $addr.
start_server() {
	# Emptied here, not by the background job's redirection: that happens
	# after the fork, so the loop below could read the previous server's
	# address from the old log (it did, once, in CI).
	: >"$work/serve.log"
	"$bin" serve --data "$work/data" --listen 127.0.0.1:0 --log-level debug "$@" 2>>"$work/serve.log" &
	server_pid=$!
	addr=
	for _ in $(seq 100); do
		addr=$(sed -n 's/^spool: serving on //p' "$work/serve.log")
		[ -n "$addr" ] && break
		kill -0 "$server_pid" 2>/dev/null || fail "spool serve exited before listening"
		sleep 0.1
	done
	[ -n "$addr" ] || fail "spool serve did not report its address"
	echo "kcat.sh: spool serve${*:+ $*} on $addr"
}

# stop_server: SIGTERM, which must end it with status 0.
stop_server() {
	kill -TERM "$server_pid"
	local status=0
	wait "$server_pid" || status=$?
	server_pid=
	[ "$status" = 0 ] || fail "spool serve exited $status after SIGTERM"
}

start_server
kc() { timeout 60 kcat -b "$addr" -m 10 "$@"; }

# Metadata (-L): the topic with its partitions, led by broker 1.
kc -L -t "$topic" >"$work/metadata"
grep -q "topic \"$topic\" with $partitions partitions" "$work/metadata" || { cat "$work/metadata"; fail "metadata"; }

# Produce: "key:value" lines, keys spread over partitions; the second half
# with the idempotent producer and lz4.
half=$((n / 2))
for i in $(seq 1 $half); do echo "k$((i % 17)):v$i"; done >"$work/produced1"
for i in $(seq $((half + 1)) $n); do echo "k$((i % 17)):v$i"; done >"$work/produced2"
kc -P -t "$topic" -K: -X acks=all <"$work/produced1"
kc -P -t "$topic" -K: -z lz4 -X enable.idempotence=true <"$work/produced2"
cat "$work/produced1" "$work/produced2" >"$work/produced"

# Consume by partition from the beginning to the end; -f prints
# "partition offset key value".
kc -C -t "$topic" -o beginning -e -q -f '%p %o %k %s\n' >"$work/consumed"

# check FILE WHAT: every produced record exactly once; per partition
# offsets 0, 1, 2, ... in order; per key (one partition each) the values in
# the order they were produced.
check() {
	local file=$1 what=$2
	[ "$(wc -l <"$file")" -eq "$n" ] || fail "$what: consumed $(wc -l <"$file") records, produced $n"
	diff <(awk '{print $3 ":" $4}' "$file" | sort) <(sort "$work/produced") >/dev/null ||
		fail "$what: consumed records differ from produced ones: $(diff <(awk '{print $3 ":" $4}' "$file" | sort) <(sort "$work/produced") | head -5)"
	awk -v what="$what" '
		{ if (($1 in next_off) ? $2 != next_off[$1] : $2 != 0) { printf "%s: partition %s offset %s, expected %d\n", what, $1, $2, next_off[$1]; bad = 1 }
		  next_off[$1] = $2 + 1
		  v = substr($4, 2) + 0
		  if (($3 in last) && v <= last[$3]) { printf "%s: key %s value v%d after v%d\n", what, $3, v, last[$3]; bad = 1 }
		  last[$3] = v
		  if (($3 in part) && part[$3] != $1) { printf "%s: key %s in partitions %s and %s\n", what, $3, part[$3], $1; bad = 1 }
		  part[$3] = $1 }
		END { exit bad }' "$file" || fail "$what: order"
}
check "$work/consumed" "kcat -C"

# The same through a consumer group (-G: FindCoordinator, JoinGroup,
# SyncGroup, OffsetFetch, Fetch, OffsetCommit, LeaveGroup). With -e it
# exits once it has reached the end of every assigned partition.
kc -G kcat-group -o beginning -e -q -f '%p %o %k %s\n' -X session.timeout.ms=10000 "$topic" >"$work/group" 2>"$work/group.err" ||
	{ cat "$work/group.err"; fail "kcat -G exited non-zero"; }
sort -k1,1n -k2,2n "$work/group" >"$work/group.sorted"
check "$work/group.sorted" "kcat -G"
# -G output interleaves partitions; within each partition it must already
# be in offset order.
awk '{ if (($1 in o) && $2 <= o[$1]) { print "kcat -G: partition " $1 " went back to " $2; bad = 1 } o[$1] = $2 } END { exit bad }' "$work/group" ||
	fail "kcat -G: order"

# Query an offset by time (-Q: ListOffsets by timestamp): the start of
# time is offset 0 in every partition.
for p in $(seq 0 $((partitions - 1))); do
	out=$(kc -Q -t "$topic:$p:1")
	echo "$out" | grep -q "\[$p\] offset 0$" || fail "kcat -Q $topic:$p:1: $out"
done

stop_server

# SASL: the same data directory served with PLAIN and SCRAM users
# (librdkafka: SaslHandshake v1, then SaslAuthenticate v0). Each mechanism
# produces a few records and reads the whole topic back; a wrong password
# is refused.
start_server --sasl-plain alice:alice-pw --sasl-scram-sha-256 bob:bob-pw --sasl-scram-sha-512 carol:carol-pw
for creds in PLAIN:alice:alice-pw SCRAM-SHA-256:bob:bob-pw SCRAM-SHA-512:carol:carol-pw; do
	IFS=: read -r mech user pass <<<"$creds"
	sasl=(-X security.protocol=SASL_PLAINTEXT -X "sasl.mechanisms=$mech" -X "sasl.username=$user" -X "sasl.password=$pass")
	for i in 1 2 3; do echo "k$i:$mech-$i"; done | kc "${sasl[@]}" -P -t "$topic" -K: ||
		fail "SASL $mech: kcat -P as $user failed (errors above; the server's reason is in its log below)"
	n=$((n + 3))
	for i in 1 2 3; do echo "k$i:$mech-$i"; done >>"$work/produced"
done
kc "${sasl[@]}" -C -t "$topic" -o beginning -e -q -f '%p %o %k %s\n' >"$work/sasl-consumed"
[ "$(wc -l <"$work/sasl-consumed")" -eq "$n" ] || fail "SASL: consumed $(wc -l <"$work/sasl-consumed") records, produced $n"
diff <(awk '{print $3 ":" $4}' "$work/sasl-consumed" | sort) <(sort "$work/produced") >/dev/null || fail "SASL: consumed records differ"
if timeout 30 kcat -b "$addr" -m 5 -X security.protocol=SASL_PLAINTEXT -X sasl.mechanisms=SCRAM-SHA-256 \
	-X sasl.username=bob -X sasl.password=wrong -L >"$work/wrong" 2>&1; then
	fail "SASL: a wrong password was accepted"
fi
grep -qi "authentication failed\|Authentication" "$work/wrong" || { cat "$work/wrong"; fail "SASL: wrong password: unexpected error"; }
stop_server

# TLS (issue 13): certificates made with openssl; the server requires a
# client certificate signed by the CA (mutual TLS, security protocol SSL),
# then, on a second start, SASL SCRAM over TLS (SASL_SSL) without one.
tls=$work/tls
mkdir -p "$tls"
ossl() { openssl "$@" 2>>"$work/openssl.log" >/dev/null || { cat "$work/openssl.log"; fail "openssl $1"; }; }
ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj "/CN=kcat test CA" -keyout "$tls/ca.key" -out "$tls/ca.crt"
for who in server client; do
	ossl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/O=spool/CN=kcat-$who" -keyout "$tls/$who.key" -out "$tls/$who.csr"
	printf 'subjectAltName=IP:127.0.0.1\n' >"$tls/$who.ext"
	ossl x509 -req -in "$tls/$who.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" -CAcreateserial -days 1 -extfile "$tls/$who.ext" -out "$tls/$who.crt"
done
start_server --tls-cert "$tls/server.crt" --tls-key "$tls/server.key" --tls-client-ca "$tls/ca.crt"
ssl=(-X security.protocol=SSL -X "ssl.ca.location=$tls/ca.crt" -X "ssl.certificate.location=$tls/client.crt" -X "ssl.key.location=$tls/client.key")
for i in 1 2 3; do echo "k$i:ssl-$i"; done | kc "${ssl[@]}" -P -t "$topic" -K: || fail "SSL: kcat -P with a client certificate failed"
n=$((n + 3))
for i in 1 2 3; do echo "k$i:ssl-$i"; done >>"$work/produced"
kc "${ssl[@]}" -C -t "$topic" -o beginning -e -q -f '%p %o %k %s\n' >"$work/ssl-consumed"
[ "$(wc -l <"$work/ssl-consumed")" -eq "$n" ] || fail "SSL: consumed $(wc -l <"$work/ssl-consumed") records, produced $n"
diff <(awk '{print $3 ":" $4}' "$work/ssl-consumed" | sort) <(sort "$work/produced") >/dev/null || fail "SSL: consumed records differ"
grep -q 'principal="User:CN=kcat-client,O=spool"' "$work/serve.log" || fail "SSL: the client certificate's subject is not the principal"
if timeout 30 kcat -b "$addr" -m 5 -X security.protocol=SSL -X "ssl.ca.location=$tls/ca.crt" -L >"$work/nocert" 2>&1; then
	fail "SSL: a client without a certificate was let in"
fi
if timeout 30 kcat -b "$addr" -m 5 -L >"$work/plaintext" 2>&1; then
	fail "SSL: a plaintext client was served on the TLS port"
fi
stop_server
start_server --tls-cert "$tls/server.crt" --tls-key "$tls/server.key" --sasl-scram-sha-512 dave:dave-pw
sasl_ssl=(-X security.protocol=SASL_SSL -X "ssl.ca.location=$tls/ca.crt" -X sasl.mechanisms=SCRAM-SHA-512 -X sasl.username=dave -X sasl.password=dave-pw)
for i in 1 2 3; do echo "k$i:sasl-ssl-$i"; done | kc "${sasl_ssl[@]}" -P -t "$topic" -K: || fail "SASL_SSL: kcat -P failed"
n=$((n + 3))
for i in 1 2 3; do echo "k$i:sasl-ssl-$i"; done >>"$work/produced"
kc "${sasl_ssl[@]}" -C -t "$topic" -o beginning -e -q -f '%p %o %k %s\n' >"$work/sasl-ssl-consumed"
[ "$(wc -l <"$work/sasl-ssl-consumed")" -eq "$n" ] || fail "SASL_SSL: consumed $(wc -l <"$work/sasl-ssl-consumed") records, produced $n"
if timeout 30 kcat -b "$addr" -m 5 -X security.protocol=SASL_SSL -X "ssl.ca.location=$tls/ca.crt" -X sasl.mechanisms=SCRAM-SHA-512 \
	-X sasl.username=dave -X sasl.password=wrong -L >"$work/wrong" 2>&1; then
	fail "SASL_SSL: a wrong password was accepted"
fi
stop_server

# Issue 17: a damaged batch is never served as data. One byte of
# "value-100" is changed on disk; kcat (librdkafka checks no CRC by
# default) must not print it: the broker answers CORRUPT_MESSAGE, which
# librdkafka calls "Invalid message", and kcat stops on it.
"$bin" topics create --data "$work/data" --topic damaged >/dev/null
seq 1 3000 | sed 's/^/value-/' | "$bin" produce --data "$work/data" --topic damaged >/dev/null
seg="$work/data/damaged-0/00000000000000000000.log"
at=$(grep -abo value-100 "$seg" | head -1 | cut -d: -f1)
printf w | dd of="$seg" bs=1 seek="$at" conv=notrunc 2>/dev/null
if "$bin" check --quiet "$work/data" >"$work/check" 2>&1; then fail "spool check did not find the damage"; fi
grep -q crc32c "$work/check" || { cat "$work/check"; fail "spool check: no crc32c mismatch reported"; }
start_server
if kc -C -t damaged -o beginning -e -f '%o %s\n' >"$work/damaged" 2>"$work/damaged.err"; then
	fail "kcat read past a damaged batch without an error"
fi
if grep walue "$work/damaged"; then fail "kcat printed the damaged record as data"; fi
grep -q "Invalid message" "$work/damaged.err" || { cat "$work/damaged.err"; fail "kcat: no CORRUPT_MESSAGE (Invalid message) error"; }
stop_server

echo "kcat.sh: ok: $n records produced (plain, idempotent lz4, over SASL PLAIN/SCRAM-SHA-256/SCRAM-SHA-512, over mutual TLS and SASL_SSL), consumed with -C and -G, offsets queried with -Q; a damaged batch refused"
