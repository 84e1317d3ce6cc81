package mesh

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"regexp"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// SlogLogger returns an hclog.Logger that writes to l, for Config.Logger
// or anything else that takes an hclog.Logger: the mesh's records and
// memberlist's reach l's handler with their levels, attributes and
// source. hclog's levels map to slog's as
//
//	Trace  slog.LevelDebug-4
//	Debug  slog.LevelDebug
//	Info   slog.LevelInfo
//	Warn   slog.LevelWarn
//	Error  slog.LevelError
//
// and back: IsDebug, GetLevel and the rest ask l's handler whether it is
// enabled at the mapped level, so that the mesh builds no record l would
// drop. Named adds to a "logger" attribute ("lockmesh.memberlist"), With
// to the attributes, and the writers of StandardLogger and StandardWriter
// read a "[WARN]"-style prefix as hclog's do (memberlist writes its lines
// so). SetLevel sets a floor below which records are dropped before l
// sees them, shared by the loggers derived from this one. A nil l means
// slog.Default().
func SlogLogger(l *slog.Logger) hclog.Logger {
	if l == nil {
		l = slog.Default()
	}
	return &slogLogger{base: l, l: l, floor: new(atomic.Int32)}
}

// slogLogger is SlogLogger's hclog.Logger.
type slogLogger struct {
	base    *slog.Logger // as given, for ResetNamed
	l       *slog.Logger // base with the implied args
	implied []any
	name    string
	floor   *atomic.Int32 // SetLevel's hclog.Level; NoLevel: none
}

var _ hclog.Logger = (*slogLogger)(nil)

// slogLevel maps an hclog level to slog's (NoLevel, Log's default, is
// Info).
func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (s *slogLogger) enabled(level hclog.Level) bool {
	if level == hclog.Off {
		return false
	}
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	if f := hclog.Level(s.floor.Load()); f != hclog.NoLevel && level < f {
		return false
	}
	return s.l.Enabled(context.Background(), slogLevel(level))
}

// log writes one record; skip is the number of frames between the
// caller to report and log.
func (s *slogLogger) log(skip int, level hclog.Level, msg string, args []any) {
	if !s.enabled(level) {
		return
	}
	var pc uintptr
	if skip > 0 {
		var pcs [1]uintptr
		runtime.Callers(skip+2, pcs[:]) // runtime.Callers and log itself
		pc = pcs[0]
	}
	r := slog.NewRecord(time.Now(), slogLevel(level), msg, pc)
	if s.name != "" {
		r.AddAttrs(slog.String("logger", s.name))
	}
	r.Add(args...)
	_ = s.l.Handler().Handle(context.Background(), r)
}

func (s *slogLogger) Log(level hclog.Level, msg string, args ...any) { s.log(1, level, msg, args) }
func (s *slogLogger) Trace(msg string, args ...any)                  { s.log(1, hclog.Trace, msg, args) }
func (s *slogLogger) Debug(msg string, args ...any)                  { s.log(1, hclog.Debug, msg, args) }
func (s *slogLogger) Info(msg string, args ...any)                   { s.log(1, hclog.Info, msg, args) }
func (s *slogLogger) Warn(msg string, args ...any)                   { s.log(1, hclog.Warn, msg, args) }
func (s *slogLogger) Error(msg string, args ...any)                  { s.log(1, hclog.Error, msg, args) }

func (s *slogLogger) IsTrace() bool { return s.enabled(hclog.Trace) }
func (s *slogLogger) IsDebug() bool { return s.enabled(hclog.Debug) }
func (s *slogLogger) IsInfo() bool  { return s.enabled(hclog.Info) }
func (s *slogLogger) IsWarn() bool  { return s.enabled(hclog.Warn) }
func (s *slogLogger) IsError() bool { return s.enabled(hclog.Error) }

// GetLevel is the lowest level a record is written at: Off if none.
func (s *slogLogger) GetLevel() hclog.Level {
	for l := hclog.Trace; l <= hclog.Error; l++ {
		if s.enabled(l) {
			return l
		}
	}
	return hclog.Off
}

// SetLevel drops records below level from here on, in this logger and
// every one derived from it or from the logger it derives from; NoLevel
// leaves the choice to the handler again. It cannot let through what the
// handler drops.
func (s *slogLogger) SetLevel(level hclog.Level) { s.floor.Store(int32(level)) }

func (s *slogLogger) ImpliedArgs() []any { return s.implied }

func (s *slogLogger) With(args ...any) hclog.Logger {
	c := *s
	c.implied = append(s.implied[:len(s.implied):len(s.implied)], args...)
	c.l = s.l.With(args...)
	return &c
}

func (s *slogLogger) Name() string { return s.name }

func (s *slogLogger) Named(name string) hclog.Logger {
	c := *s
	if c.name != "" {
		name = c.name + "." + name
	}
	c.name = name
	return &c
}

func (s *slogLogger) ResetNamed(name string) hclog.Logger {
	c := *s
	c.name = name
	return &c
}

func (s *slogLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(s.StandardWriter(opts), "", 0)
}

// StandardWriter writes each line to the logger: at opts.ForceLevel if
// set (a level prefix is removed), else at the level its prefix says when
// opts.InferLevels (after a timestamp, with InferLevelsWithTimestamp),
// else at Info.
func (s *slogLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	if opts == nil {
		opts = &hclog.StandardLoggerOptions{}
	}
	return &slogWriter{s: s, opts: *opts}
}

type slogWriter struct {
	s    *slogLogger
	opts hclog.StandardLoggerOptions
}

// timestampPrefix is what InferLevelsWithTimestamp skips: the characters
// of the usual timestamp formats (hclog skips the same).
var timestampPrefix = regexp.MustCompile(`^[\d\s\:\/\.\+-TZ]*`)

func (w *slogWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimRight(p, " \t\n"))
	level := hclog.Info
	switch {
	case w.opts.ForceLevel != hclog.NoLevel:
		_, line = levelPrefix(line)
		level = w.opts.ForceLevel
	case w.opts.InferLevels:
		if w.opts.InferLevelsWithTimestamp {
			line = line[timestampPrefix.FindStringIndex(line)[1]:]
		}
		level, line = levelPrefix(line)
	}
	w.s.log(0, level, line, nil)
	return len(p), nil
}

// levelPrefix reads a "[WARN]"-style prefix: the level it names (Info if
// none) and the line without it.
func levelPrefix(line string) (hclog.Level, string) {
	for _, p := range []struct {
		prefix string
		level  hclog.Level
	}{
		{"[TRACE]", hclog.Trace}, {"[DEBUG]", hclog.Debug}, {"[INFO]", hclog.Info},
		{"[WARN]", hclog.Warn}, {"[ERROR]", hclog.Error}, {"[ERR]", hclog.Error},
	} {
		if rest, ok := strings.CutPrefix(line, p.prefix); ok {
			return p.level, strings.TrimSpace(rest)
		}
	}
	return hclog.Info, line
}
