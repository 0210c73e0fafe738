package rmqbenthos

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/rmqflow/rmqflow"
	"github.com/rmqflow/rmqflow/client"
)

// Field names shared by the input, the output and the ack processor.
const (
	fieldEndpoints      = "endpoints"
	fieldNamespace      = "namespace"
	fieldAccessKey      = "access_key"
	fieldSecretKey      = "secret_key"
	fieldSecurityToken  = "security_token"
	fieldTLS            = "tls"
	fieldRequestTimeout = "request_timeout"
)

// connectionFields are the fields of an rmqflow.Connection.
func connectionFields() []*service.ConfigField {
	return []*service.ConfigField{
		service.NewStringField(fieldEndpoints).
			Description("The RocketMQ 5 proxy's gRPC access point, `host:port`, or several separated by `;`.").
			Example("127.0.0.1:8081"),
		service.NewStringField(fieldNamespace).
			Description("The namespace of the topics and groups; empty for none.").
			Default("").Advanced(),
		service.NewStringField(fieldAccessKey).
			Description("The access key that signs every request; empty for anonymous access.").
			Default(""),
		service.NewStringField(fieldSecretKey).
			Description("The secret key that goes with `access_key`. Never logged.").
			Default("").Secret(),
		service.NewStringField(fieldSecurityToken).
			Description("An STS session token, sent with every request when set.").
			Default("").Secret().Advanced(),
		service.NewTLSToggledField(fieldTLS),
		service.NewDurationField(fieldRequestTimeout).
			Description("The deadline of each RPC.").
			Default(client.DefaultRequestTimeout.String()).Advanced(),
	}
}

// parseConnection reads the connectionFields of conf.
func parseConnection(conf *service.ParsedConfig, log *service.Logger) (rmqflow.Connection, error) {
	var c rmqflow.Connection
	var err error
	if c.Endpoints, err = conf.FieldString(fieldEndpoints); err != nil {
		return c, err
	}
	if c.Namespace, err = conf.FieldString(fieldNamespace); err != nil {
		return c, err
	}
	if c.Credentials.AccessKey, err = conf.FieldString(fieldAccessKey); err != nil {
		return c, err
	}
	if c.Credentials.AccessSecret, err = conf.FieldString(fieldSecretKey); err != nil {
		return c, err
	}
	if c.Credentials.SecurityToken, err = conf.FieldString(fieldSecurityToken); err != nil {
		return c, err
	}
	if (c.Credentials.AccessKey == "") != (c.Credentials.AccessSecret == "") {
		return c, fmt.Errorf("%s and %s go together: set both or neither", fieldAccessKey, fieldSecretKey)
	}
	tlsConf, tlsOn, err := conf.FieldTLSToggled(fieldTLS)
	if err != nil {
		return c, err
	}
	if tlsOn {
		c.TLS = tlsConf
	}
	if c.RequestTimeout, err = conf.FieldDuration(fieldRequestTimeout); err != nil {
		return c, err
	}
	if c.RequestTimeout <= 0 {
		return c, fmt.Errorf("%s must be positive", fieldRequestTimeout)
	}
	if _, err := client.ParseEndpoints(c.Endpoints); err != nil {
		return c, fmt.Errorf("%s: %w", fieldEndpoints, err)
	}
	c.Logger = slog.New(&logHandler{log: log})
	return c, nil
}

// logHandler sends rmqflow's slog records to the component's Benthos logger,
// so that they carry the component's label and follow the config's level.
type logHandler struct {
	log   *service.Logger
	attrs []slog.Attr
	group string
}

func (h *logHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	write := func(a slog.Attr) {
		if a.Equal(slog.Attr{}) {
			return
		}
		b.WriteByte(' ')
		if h.group != "" {
			b.WriteString(h.group)
			b.WriteByte('.')
		}
		fmt.Fprintf(&b, "%s=%v", a.Key, a.Value.Resolve())
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(func(a slog.Attr) bool {
		write(a)
		return true
	})
	msg := b.String()
	switch {
	case r.Level >= slog.LevelError:
		h.log.Error(msg)
	case r.Level >= slog.LevelWarn:
		h.log.Warn(msg)
	case r.Level >= slog.LevelInfo:
		h.log.Info(msg)
	default:
		h.log.Debug(msg)
	}
	return nil
}

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &logHandler{log: h.log, attrs: append(append([]slog.Attr(nil), h.attrs...), as...), group: h.group}
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	g := name
	if h.group != "" {
		g = h.group + "." + name
	}
	return &logHandler{log: h.log, attrs: h.attrs, group: g}
}
