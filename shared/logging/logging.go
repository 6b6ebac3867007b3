// Package logging builds the one *zap.Logger a process uses: JSON lines in
// production, coloured console lines in the dev stack.
package logging

import (
	"fmt"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New builds a logger. level is debug, info, warn or error; format is json
// (production encoder, ISO8601 times) or console (development encoder).
// Invalid values return an error naming them.
func New(level, format string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("logging: level %q: %w", level, err)
	}
	var cfg zap.Config
	switch format {
	case "json":
		cfg = zap.NewProductionConfig()
		cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	case "console":
		cfg = zap.NewDevelopmentConfig()
		cfg.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
		cfg.DisableStacktrace = true
	default:
		return nil, fmt.Errorf("logging: format %q: must be json or console", format)
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	return cfg.Build()
}
