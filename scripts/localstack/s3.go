package localstack

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// S3 is an in-process, in-memory S3 (gofakes3) on a loopback listener.
// Clients must use path-style addressing: see S3Client.
type S3 struct {
	// Endpoint is http://127.0.0.1:PORT, for AWSConfig.
	Endpoint string
	Port     int
	server   *http.Server
	served   chan error
}

// StartS3 serves a fresh in-memory S3 on a free loopback port.
func StartS3(ctx context.Context) (*S3, error) {
	return StartS3On(ctx, 0)
}

// StartS3On serves a fresh in-memory S3 on port (0 picks a free one), for
// `make run`, which wants a fixed address.
func StartS3On(ctx context.Context, port int) (*S3, error) {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return nil, err
	}
	faker := gofakes3.New(s3mem.New(), gofakes3.WithAutoBucket(false))
	s := &S3{
		Port:   l.Addr().(*net.TCPAddr).Port,
		server: &http.Server{Handler: faker.Server(), ReadHeaderTimeout: 10 * time.Second},
		served: make(chan error, 1),
	}
	s.Endpoint = "http://127.0.0.1:" + strconv.Itoa(s.Port)
	go func() { s.served <- s.server.Serve(l) }()
	return s, nil
}

// Stop closes the listener and every connection.
func (s *S3) Stop() error {
	err := s.server.Close()
	if serveErr := <-s.served; !errors.Is(serveErr, http.ErrServerClosed) && err == nil {
		err = serveErr
	}
	return err
}
