package worker

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
)

// LifecycleCompleter is the one Auto Scaling call the worker makes
// (*autoscaling.Client).
type LifecycleCompleter interface {
	CompleteLifecycleAction(ctx context.Context, in *autoscaling.CompleteLifecycleActionInput, opts ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error)
}

// ASGHook completes this instance's termination lifecycle hook
// (infra/renderer-fleet.yaml declares it), telling the autoscaling group the
// worker is empty and the instance may terminate now rather than at the
// hook's timeout.
type ASGHook struct {
	Client     LifecycleCompleter
	GroupName  string
	HookName   string
	InstanceID string
}

// Complete sends CONTINUE for this instance.
func (h *ASGHook) Complete(ctx context.Context) error {
	_, err := h.Client.CompleteLifecycleAction(ctx, &autoscaling.CompleteLifecycleActionInput{
		AutoScalingGroupName:  aws.String(h.GroupName),
		LifecycleHookName:     aws.String(h.HookName),
		InstanceId:            aws.String(h.InstanceID),
		LifecycleActionResult: aws.String("CONTINUE"),
	})
	if err != nil {
		return fmt.Errorf("complete lifecycle action %s for %s: %w", h.HookName, h.InstanceID, err)
	}
	return nil
}
