package transport

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/spoolmq/spool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// mountTmpfs mounts a tmpfs of the given size (mount's size= option) for
// the test and returns its path. Mounting needs root (CAP_SYS_ADMIN): the
// test is skipped, saying why, where that is not allowed.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	require.NoError(t, os.Mkdir(dir, 0o755))
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("skipped: cannot mount a %s tmpfs for a real full disk (needs root): %v", size, err)
	}
	// Detached, so that a broker a failed test left open cannot keep it mounted.
	t.Cleanup(func() { require.NoError(t, syscall.Unmount(dir, syscall.MNT_DETACH)) })
	return dir
}

// fillLeaving allocates the file ballast so that about leave bytes of the
// file system at dir stay free.
func fillLeaving(t *testing.T, dir, ballast string, leave int64) {
	t.Helper()
	require.NoError(t, os.Remove(ballast))
	var st syscall.Statfs_t
	require.NoError(t, syscall.Statfs(dir, &st))
	free := int64(st.Bavail) * st.Bsize
	require.Greater(t, free, leave)
	f, err := os.Create(ballast)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, syscall.Fallocate(int(f.Fd()), 0, 0, free-leave))
}

// The report's reproduction, on a real full disk (a 48 MiB tmpfs): with
// less free space than a partition's files take (a page, where its two
// indexes take one each at creation), CreateTopics
// and auto-creation answer KAFKA_STORAGE_ERROR saying the disk is full,
// and leave nothing; once space is freed, the same requests succeed on the
// same running server, and a Kafka client produces to the new topic.
func TestCreateTopicsOnRealFullDisk(t *testing.T) {
	m := mountTmpfs(t, "48m")
	dir := filepath.Join(m, "data")
	ballast := filepath.Join(m, "ballast")
	require.NoError(t, os.WriteFile(ballast, nil, 0o644))
	n := adminStart(t, dir, spool.Options{}, Options{})
	cl := adminClient(t, n.addr)
	fillLeaving(t, m, ballast, 4<<10) // a page: a partition's files do not fit

	resp := adminKgo[*kmsg.CreateTopicsResponse](t, cl, createTopicsReq("full", 1))
	require.Equal(t, errKafkaStorageError, resp.Topics[0].ErrorCode)
	require.Contains(t, *resp.Topics[0].ErrorMessage, "no space left on device")
	meta := kmsg.NewPtrMetadataRequest()
	meta.Topics = []kmsg.MetadataRequestTopic{metadataTopic("auto1")}
	meta.AllowAutoTopicCreation = true
	mresp := adminKgo[*kmsg.MetadataResponse](t, cl, meta)
	require.Equal(t, errKafkaStorageError, topicByName(mresp.Topics, "auto1").ErrorCode)
	require.Empty(t, n.b.Topics())
	require.Empty(t, storageTopics(t, dir, "full"))
	require.Empty(t, storageTopics(t, dir, "auto1"))

	require.NoError(t, os.Truncate(ballast, 0))
	resp = adminKgo[*kmsg.CreateTopicsResponse](t, cl, createTopicsReq("full", 1))
	require.Equal(t, errNone, resp.Topics[0].ErrorCode)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	producer := adminClient(t, n.addr, kgo.AllowAutoTopicCreation())
	require.NoError(t, producer.ProduceSync(ctx, &kgo.Record{Topic: "auto1", Value: []byte("x")}).FirstErr())
	require.ElementsMatch(t, []string{"full", "auto1"}, n.b.Topics())
}
