package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// Interrupted is the cause of a run's context when a signal ended it.
type Interrupted struct{ Signal syscall.Signal }

func (i Interrupted) Error() string { return "interrupted by " + i.Signal.String() }

// Main runs the program on os.Args with SIGINT and SIGTERM cancelling its
// context (cause: Interrupted) and returns the exit code.
func (a *App) Main(add ...func(root *cobra.Command)) int {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		select {
		case s := <-sigs:
			cancel(Interrupted{Signal: s.(syscall.Signal)})
		case <-ctx.Done():
		}
	}()
	return a.Run(ctx, a.Root(add...), os.Args[1:])
}

// interruptedCode is 128+N when ctx was ended by signal N (the exit code a
// shell gives a tool killed by it), else 0.
func interruptedCode(ctx context.Context) int {
	var i Interrupted
	if errors.As(context.Cause(ctx), &i) {
		return 128 + int(i.Signal)
	}
	return 0
}

// Fatalf prints a message about the program itself and returns 1: for
// failures before a command runs.
func (a *App) Fatalf(format string, args ...any) int {
	fmt.Fprintf(a.Stderr, a.Name+": "+format+"\n", args...)
	return ExitFailure
}
