package localstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3bolt"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	bolt "go.etcd.io/bbolt"
)

// S3 is an in-process S3 (gofakes3) on a loopback listener: in memory, or
// in one bbolt file when started with a data directory.
// Clients must use path-style addressing: see S3Client.
type S3 struct {
	// Endpoint is http://127.0.0.1:PORT, for AWSConfig.
	Endpoint string
	Port     int
	// DataFile is the bbolt file holding every bucket and object; empty
	// when the data is in memory.
	DataFile string
	server   *http.Server
	served   chan error
	db       *bolt.DB
}

// s3DataFile is the file under Options.DataDir that holds S3's data.
const s3DataFile = "s3.bolt"

// StartS3 serves a fresh in-memory S3 on a free loopback port.
func StartS3(ctx context.Context) (*S3, error) {
	return StartS3With(ctx, Options{})
}

// StartS3On serves a fresh in-memory S3 on port (0 picks a free one).
func StartS3On(ctx context.Context, port int) (*S3, error) {
	return StartS3With(ctx, Options{Port: port})
}

// StartS3With serves S3 on opts.Port (0 picks a free one). With
// opts.DataDir the buckets and objects live in DataDir/s3.bolt, so a
// restarted `make run` finds the avatars it stored beside the DynamoDB items
// that point to them; otherwise they live in memory. Only one server may
// hold the file at a time.
func StartS3With(ctx context.Context, opts Options) (*S3, error) {
	var backend gofakes3.Backend = s3mem.New()
	var db *bolt.DB
	file := ""
	if opts.DataDir != "" {
		if err := os.MkdirAll(opts.DataDir, 0o755); err != nil {
			return nil, err
		}
		file = filepath.Join(opts.DataDir, s3DataFile)
		var err error
		// bbolt locks the file; a second server on the same data would
		// wait forever without the timeout.
		db, err = bolt.Open(file, 0o600, &bolt.Options{Timeout: 5 * time.Second})
		if err != nil {
			return nil, fmt.Errorf("localstack: open S3 data %s (in use by another stack?): %w", file, err)
		}
		backend = s3bolt.New(db)
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(opts.Port))
	if err != nil {
		if db != nil {
			db.Close()
		}
		return nil, err
	}
	faker := gofakes3.New(backend, gofakes3.WithAutoBucket(false))
	s := &S3{
		Port:     l.Addr().(*net.TCPAddr).Port,
		DataFile: file,
		server:   &http.Server{Handler: faker.Server(), ReadHeaderTimeout: 10 * time.Second},
		served:   make(chan error, 1),
		db:       db,
	}
	s.Endpoint = "http://127.0.0.1:" + strconv.Itoa(s.Port)
	go func() { s.served <- s.server.Serve(l) }()
	return s, nil
}

// Stop closes the listener and every connection, then the data file.
func (s *S3) Stop() error {
	err := s.server.Close()
	if serveErr := <-s.served; !errors.Is(serveErr, http.ErrServerClosed) && err == nil {
		err = serveErr
	}
	if s.db != nil {
		err = errors.Join(err, s.db.Close())
	}
	return err
}
