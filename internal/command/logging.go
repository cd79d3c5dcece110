package command

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/urfave/cli/v2"
	"k8s.io/klog/v2"
)

// LogFlags are the logging flags of every long-running command.
var LogFlags = []cli.Flag{
	&cli.StringFlag{Name: "log-format", Value: "text", Usage: "log format: text or json"},
	&cli.StringFlag{Name: "log-level", Value: "info", Usage: "log level: debug, info, warn or error"},
}

// NewLogger returns the slog logger the flags ask for and routes client-go's klog into it.
func NewLogger(c *cli.Context, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch strings.ToLower(c.String("log-format")) {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("--log-format: %q is not text or json", c.String("log-format"))
	}
	log := slog.New(h)
	klog.SetSlogLogger(log)
	return log, nil
}
