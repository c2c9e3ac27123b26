// Package media stores avatar images in S3.
package media

import (
	"bytes"
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Bucket is the media bucket.
type Bucket struct {
	client *s3.Client
	name   string
}

// NewBucket returns the bucket called name.
func NewBucket(client *s3.Client, name string) *Bucket { return &Bucket{client: client, name: name} }

// Name is the bucket's name.
func (b *Bucket) Name() string { return b.name }

// Put stores data under key.
func (b *Bucket) Put(ctx context.Context, key string, data []byte, contentType string) error {
	_, err := b.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(b.name), Key: aws.String(key), Body: bytes.NewReader(data),
		ContentType: aws.String(contentType), ContentLength: aws.Int64(int64(len(data))),
	})
	if err != nil {
		return fmt.Errorf("put s3://%s/%s: %w", b.name, key, err)
	}
	return nil
}

// Delete removes key.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	_, err := b.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b.name), Key: aws.String(key)})
	if err != nil {
		return fmt.Errorf("delete s3://%s/%s: %w", b.name, key, err)
	}
	return nil
}
