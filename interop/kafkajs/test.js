// kafkajs 2.2.4 against spool serve: admin createTopics (and the topic,
// offset and group calls around it), a producer with acks=-1 and an
// idempotent producer, and a consumer group; every produced record must
// be consumed exactly once and in order per partition, and the group's
// committed offsets must end at the end offsets. Transactions: commits and
// an abort, with group offsets sent inside them, read back with
// readUncommitted false (read_committed) and true. Then, on a server that
// requires SASL, the same with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, and
// a wrong password refused.
//
// Usage: node test.js (from interop/kafkajs, after npm ci). It starts
// spool serve itself: $SPOOL_BIN, or a binary built with go build. Exits
// non-zero on any mismatch, printing the server's log.
'use strict'

const { spawn, execFileSync } = require('child_process')
const fs = require('fs')
const os = require('os')
const path = require('path')
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'
const { Kafka, logLevel } = require('kafkajs')

// The whole test must finish within this, or it fails with the server's
// log.
const deadlineMs = 120000

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'spool-kafkajs-'))
let server = null
let serverLog = ''
let bin = process.env.SPOOL_BIN

// startServer starts spool serve on a fresh data directory with extra
// flags and resolves to its address.
function startServer (args = []) {
  if (!bin) {
    bin = path.join(work, 'spool')
    execFileSync('go', ['build', '-o', bin, 'github.com/spoolmq/spool/cmd/spool'], { cwd: path.join(__dirname, '..'), stdio: 'inherit' })
  }
  const data = fs.mkdtempSync(path.join(work, 'data-'))
  serverLog += `--- spool serve ${args.join(' ')}\n`
  const logStart = serverLog.length
  server = spawn(bin, ['serve', '--data', data, '--listen', '127.0.0.1:0', '--log-level', 'debug', ...args],
    { stdio: ['ignore', 'ignore', 'pipe'] })
  server.exited = new Promise(resolve => server.on('exit', (code, signal) => resolve({ code, signal })))
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('spool serve did not report its address')), 30000)
    server.stderr.on('data', chunk => {
      serverLog += chunk
      const m = /^spool: serving on (\S+)$/m.exec(serverLog.slice(logStart))
      if (m) {
        clearTimeout(timer)
        resolve(m[1])
      }
    })
    server.exited.then(({ code }) => reject(new Error(`spool serve exited (${code}) before listening`)))
  })
}

// stopServer sends SIGTERM, which must end the server with status 0.
async function stopServer () {
  if (!server || server.exitCode !== null) return
  server.kill('SIGTERM')
  const { code, signal } = await server.exited
  if (code !== 0) throw new Error(`spool serve exited with ${code} (${signal}) after SIGTERM`)
}

function check (cond, ...msg) {
  if (!cond) throw new Error(msg.join(' '))
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

async function waitFor (what, cond, ms = 30000) {
  const end = Date.now() + ms
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await sleep(20)
  }
}

async function main () {
  const addr = await startServer()
  console.log(`kafkajs: spool serve on ${addr}`)
  const kafka = new Kafka({
    clientId: 'kafkajs-interop',
    brokers: [addr],
    logLevel: logLevel.WARN,
    retry: { retries: 5, initialRetryTime: 100 }
  })
  const topic = 'kafkajs-test'
  const partitions = 3
  const groupId = 'kafkajs-group'

  // Admin: createTopics (true when created, false when it exists),
  // listTopics, fetchTopicMetadata.
  const admin = kafka.admin()
  await admin.connect()
  check(await admin.createTopics({ topics: [{ topic, numPartitions: partitions }], waitForLeaders: true }) === true, 'createTopics did not create', topic)
  // kafkajs logs the expected TOPIC_ALREADY_EXISTS as an error: use a
  // silent client for that call.
  const quietAdmin = new Kafka({ clientId: 'kafkajs-interop', brokers: [addr], logLevel: logLevel.NOTHING }).admin()
  await quietAdmin.connect()
  check(await quietAdmin.createTopics({ topics: [{ topic, numPartitions: partitions }] }) === false, 'createTopics of an existing topic returned true')
  await quietAdmin.disconnect()
  check((await admin.listTopics()).includes(topic), 'listTopics does not list', topic)
  const meta = await admin.fetchTopicMetadata({ topics: [topic] })
  check(meta.topics[0].partitions.length === partitions, 'metadata:', JSON.stringify(meta))

  // Produce: explicit partitions, so each message's offset is its
  // partition's baseOffset plus its index among the batch's messages for
  // that partition. One producer with acks=-1, one idempotent.
  const produced = new Map() // partition -> Map(offset -> value)
  for (let p = 0; p < partitions; p++) produced.set(p, new Map())
  let count = 0
  async function produce (producer, prefix, batches, perBatch) {
    for (let b = 0; b < batches; b++) {
      const messages = []
      for (let i = 0; i < perBatch; i++) {
        messages.push({ partition: i % partitions, key: `k${i}`, value: `${prefix}-${b}-${i}` })
      }
      const meta = await producer.send({ topic, acks: -1, messages })
      const base = new Map(meta.map(m => [m.partition, BigInt(m.baseOffset)]))
      const index = new Map()
      for (const m of messages) {
        check(base.has(m.partition), 'no produce result for partition', m.partition, JSON.stringify(meta))
        const k = index.get(m.partition) || 0n
        index.set(m.partition, k + 1n)
        const off = (base.get(m.partition) + k).toString()
        check(!produced.get(m.partition).has(off), 'offset', off, 'of partition', m.partition, 'acknowledged twice')
        produced.get(m.partition).set(off, m.value)
        count++
      }
    }
  }
  const plain = kafka.producer()
  await plain.connect()
  await produce(plain, 'plain', 10, 30)
  await plain.disconnect()
  // An idempotent producer wants unlimited retries (kafkajs warns
  // otherwise); the deadline bounds the test.
  const idem = kafka.producer({ idempotent: true, maxInFlightRequests: 1, retry: { retries: Number.MAX_SAFE_INTEGER, initialRetryTime: 100, maxRetryTime: 1000 } })
  await idem.connect()
  await produce(idem, 'idem', 10, 30)
  await idem.disconnect()

  // fetchTopicOffsets (ListOffsets): the high watermarks add up.
  const offsets = await admin.fetchTopicOffsets(topic)
  const high = new Map(offsets.map(o => [o.partition, o.high]))
  check(offsets.reduce((n, o) => n + Number(o.high), 0) === count, 'high watermarks', JSON.stringify(offsets), 'for', count, 'records')

  // Consume in a group from the beginning.
  const consumed = new Map() // partition -> [[offset, value]]
  for (let p = 0; p < partitions; p++) consumed.set(p, [])
  let total = 0
  const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 500, maxWaitTimeInMs: 200 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      consumed.get(partition).push([message.offset, message.value.toString()])
      total++
    }
  })
  await waitFor(`${count} records (have ${total})`, () => total >= count)
  await sleep(1000) // anything extra shows up now
  await consumer.disconnect() // commits and leaves

  for (let p = 0; p < partitions; p++) {
    const want = [...produced.get(p).entries()].sort((a, b) => Number(BigInt(a[0]) - BigInt(b[0])))
    const got = consumed.get(p)
    check(got.length === want.length, `partition ${p}: ${want.length} produced, ${got.length} consumed`)
    for (let i = 0; i < want.length; i++) {
      check(got[i][0] === want[i][0] && got[i][1] === want[i][1],
        `partition ${p}: record ${i} is offset ${got[i][0]} ${got[i][1]}, want offset ${want[i][0]} ${want[i][1]}`)
    }
  }

  // The group's committed offsets are the end offsets; it is listed and
  // Empty now, and can be deleted.
  const committed = await admin.fetchOffsets({ groupId, topics: [topic] })
  for (const part of committed[0].partitions) {
    check(part.offset === high.get(part.partition), `partition ${part.partition}: committed ${part.offset}, end ${high.get(part.partition)}`)
  }
  const groups = await admin.listGroups()
  check(groups.groups.some(g => g.groupId === groupId), 'listGroups:', JSON.stringify(groups))
  const described = await admin.describeGroups([groupId])
  check(described.groups[0].state === 'Empty', 'describeGroups:', JSON.stringify(described))
  await admin.deleteGroups([groupId])
  await admin.deleteTopics({ topics: [topic] })
  check(!(await admin.listTopics()).includes(topic), 'deleted topic still listed')
  await admin.disconnect()

  await transactions(addr)

  await stopServer()
  await sasl()

  console.log(`kafkajs: ok: ${count} records produced (acks=-1 and idempotent), consumed once each in a group; admin createTopics, listTopics, fetchTopicMetadata, fetchTopicOffsets, fetchOffsets, listGroups, describeGroups, deleteGroups, deleteTopics; transactions (commit, abort, sendOffsets) read committed and uncommitted; SASL PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (admin, produce, group consume) and a wrong password refused`)
}

// transactions: a transactional producer commits a transaction, aborts
// one and commits another, each also committing the offsets of a consumer
// group (sendOffsets: AddOffsetsToTxn and TxnOffsetCommit inside the
// transaction). A consumer with readUncommitted: false (kafkajs's
// default, read_committed) gets exactly the committed records at their
// acknowledged offsets; one with readUncommitted: true gets every record.
// The group's committed offsets are the committed transactions'; the
// aborted transaction's offsets never become visible.
async function transactions (addr) {
  const kafka = new Kafka({
    clientId: 'kafkajs-txn',
    brokers: [addr],
    logLevel: logLevel.WARN,
    retry: { retries: 5, initialRetryTime: 100 }
  })
  const topic = 'kafkajs-txn'
  const partitions = 2
  const offsetsGroup = 'kafkajs-txn-offsets'
  const admin = kafka.admin()
  await admin.connect()
  check(await admin.createTopics({ topics: [{ topic, numPartitions: partitions }], waitForLeaders: true }), 'createTopics', topic)

  const committed = new Map() // partition -> Map(offset -> value)
  const all = new Map()
  for (let p = 0; p < partitions; p++) {
    committed.set(p, new Map())
    all.set(p, new Map())
  }
  // A transaction that begins while the previous one's markers are being
  // written gets CONCURRENT_TRANSACTIONS on AddPartitionsToTxn, as from
  // Kafka, and retries; kafkajs logs each such retry as an error, so the
  // producer's client is silent (a failure still throws).
  const producer = new Kafka({ clientId: 'kafkajs-txn', brokers: [addr], logLevel: logLevel.NOTHING }).producer({
    transactionalId: 'kafkajs-txn',
    idempotent: true,
    maxInFlightRequests: 1,
    retry: { retries: Number.MAX_SAFE_INTEGER, initialRetryTime: 100, maxRetryTime: 1000 }
  })
  await producer.connect()
  // txn sends one batch of perPartition records to each partition and
  // commits offsets for the group, then commits or aborts.
  async function txn (prefix, perPartition, offsets, commit) {
    const t = await producer.transaction()
    const messages = []
    for (let i = 0; i < perPartition * partitions; i++) {
      messages.push({ partition: i % partitions, value: `${prefix}-${i}` })
    }
    const meta = await t.send({ topic, acks: -1, messages })
    const base = new Map(meta.map(m => [m.partition, BigInt(m.baseOffset)]))
    const index = new Map()
    for (const m of messages) {
      check(base.has(m.partition), 'no produce result for partition', m.partition, JSON.stringify(meta))
      const k = index.get(m.partition) || 0n
      index.set(m.partition, k + 1n)
      const off = (base.get(m.partition) + k).toString()
      all.get(m.partition).set(off, m.value)
      if (commit) committed.get(m.partition).set(off, m.value)
    }
    await t.sendOffsets({ consumerGroupId: offsetsGroup, topics: [{ topic, partitions: offsets }] })
    if (commit) {
      await t.commit()
    } else {
      await t.abort()
    }
  }
  // fetchOffsets does not ask for stable offsets: the commit's markers,
  // which make its offsets visible, may still be in flight when EndTxn
  // returns.
  async function waitOffsets (want) {
    let got
    const end = Date.now() + 30000
    for (;;) {
      const res = await admin.fetchOffsets({ groupId: offsetsGroup, topics: [topic] })
      got = res[0].partitions.map(p => [p.partition, p.offset]).sort((a, b) => a[0] - b[0])
      if (JSON.stringify(got) === JSON.stringify(want)) return
      check(Date.now() < end, `group offsets ${JSON.stringify(got)}, want ${JSON.stringify(want)}`)
      await sleep(50)
    }
  }
  await txn('commit1', 20, [{ partition: 0, offset: '3' }], true)
  await waitOffsets([[0, '3'], [1, '-1']])
  await txn('abort', 15, [{ partition: 0, offset: '7' }], false)
  // The next transaction cannot begin until the abort's markers are
  // written, so once its offset for partition 1 is visible, the aborted
  // offset for partition 0 would be too.
  await txn('commit2', 10, [{ partition: 1, offset: '4' }], true)
  await waitOffsets([[0, '3'], [1, '4']])
  await producer.disconnect()

  async function consume (readUncommitted, want) {
    const count = [...want.values()].reduce((n, m) => n + m.size, 0)
    const got = new Map()
    for (let p = 0; p < partitions; p++) got.set(p, [])
    let total = 0
    const consumer = kafka.consumer({ groupId: `kafkajs-txn-read-${readUncommitted}`, readUncommitted, sessionTimeout: 10000, heartbeatInterval: 500, maxWaitTimeInMs: 200 })
    await consumer.connect()
    await consumer.subscribe({ topic, fromBeginning: true })
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        got.get(partition).push([message.offset, message.value.toString()])
        total++
      }
    })
    await waitFor(`readUncommitted ${readUncommitted}: ${count} records (have ${total})`, () => total >= count)
    await sleep(1000) // anything extra shows up now
    await consumer.disconnect()
    for (let p = 0; p < partitions; p++) {
      const w = [...want.get(p).entries()].sort((a, b) => Number(BigInt(a[0]) - BigInt(b[0])))
      const g = got.get(p)
      check(g.length === w.length, `readUncommitted ${readUncommitted}: partition ${p}: ${w.length} records expected, ${g.length} consumed: ${JSON.stringify(g)}`)
      for (let i = 0; i < w.length; i++) {
        check(g[i][0] === w[i][0] && g[i][1] === w[i][1],
          `readUncommitted ${readUncommitted}: partition ${p}: record ${i} is offset ${g[i][0]} ${g[i][1]}, want offset ${w[i][0]} ${w[i][1]}`)
      }
    }
    return count
  }
  const nc = await consume(false, committed)
  const na = await consume(true, all)
  await admin.disconnect()
  console.log(`kafkajs: transactions ok: ${nc} committed records read with readUncommitted: false, ${na} with readUncommitted: true; the group offsets of the committed transactions only`)
}

// sasl: with each mechanism create a topic, produce to it and consume it
// in a group; a wrong password is refused.
async function sasl () {
  const addr = await startServer(['--sasl-plain', 'alice:alice-pw', '--sasl-scram-sha-256', 'bob:bob-pw', '--sasl-scram-sha-512', 'carol:carol-pw'])
  console.log(`kafkajs: spool serve with SASL on ${addr}`)
  const users = [['plain', 'alice', 'alice-pw'], ['scram-sha-256', 'bob', 'bob-pw'], ['scram-sha-512', 'carol', 'carol-pw']]
  for (const [mechanism, username, password] of users) {
    const kafka = new Kafka({
      clientId: 'kafkajs-sasl',
      brokers: [addr],
      logLevel: logLevel.WARN,
      retry: { retries: 3, initialRetryTime: 100 },
      sasl: { mechanism, username, password }
    })
    const topic = `kafkajs-sasl-${mechanism}`
    const admin = kafka.admin()
    await admin.connect()
    check(await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true }), mechanism, 'createTopics')
    await admin.disconnect()
    const producer = kafka.producer()
    await producer.connect()
    const values = Array.from({ length: 10 }, (_, i) => `${mechanism}-${i}`)
    await producer.send({ topic, acks: -1, messages: values.map(value => ({ value })) })
    await producer.disconnect()
    const got = []
    const consumer = kafka.consumer({ groupId: `${topic}-group`, sessionTimeout: 10000, heartbeatInterval: 500, maxWaitTimeInMs: 200 })
    await consumer.connect()
    await consumer.subscribe({ topic, fromBeginning: true })
    await consumer.run({ eachMessage: async ({ message }) => { got.push(message.value.toString()) } })
    await waitFor(`${mechanism}: 10 records (have ${got.length})`, () => got.length >= values.length)
    await consumer.disconnect()
    check(JSON.stringify(got) === JSON.stringify(values), mechanism, 'consumed', JSON.stringify(got))
  }
  for (const [mechanism, username] of users) {
    const kafka = new Kafka({
      clientId: 'kafkajs-sasl', brokers: [addr], logLevel: logLevel.NOTHING, retry: { retries: 0 },
      sasl: { mechanism, username, password: 'wrong' }
    })
    const admin = kafka.admin()
    let err = null
    try {
      await admin.connect()
    } catch (e) {
      err = e
    }
    check(err && err.name === 'KafkaJSSASLAuthenticationError', mechanism, 'with a wrong password:', err ? `${err.name}: ${err.message}` : 'accepted')
  }
  await stopServer()
}

function deadline () {
  return new Promise((resolve, reject) => {
    setTimeout(() => reject(new Error(`not done within ${deadlineMs / 1000}s`)), deadlineMs).unref()
  })
}

Promise.race([main(), deadline()]).then(stopServer).then(() => {
  fs.rmSync(work, { recursive: true, force: true })
}).catch(async err => {
  console.error(`kafkajs: FAIL: ${err && err.stack ? err.stack : err}`)
  try { await stopServer() } catch (e) { console.error(`kafkajs: ${e.message}`) }
  console.error('kafkajs: spool serve stderr:\n' + serverLog.split('\n').slice(-200).map(l => '    ' + l).join('\n'))
  fs.rmSync(work, { recursive: true, force: true })
  process.exit(1)
})
