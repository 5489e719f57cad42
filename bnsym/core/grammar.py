"""The spec grammar of ``bnsym arch`` (read by :func:`bnsym.core.layers.parse_architecture`), apart so that
the command line's help needs no theory. One line per layer kind, starting with its spec name
(:data:`bnsym.core.layers.KINDS`; ``tests/test_layer_kinds.py`` holds every kind to have one)."""

SPEC_GRAMMAR = """\
A network spec is a comma-separated list of layers, read left to right:

  dense | dense(weight_var[,bias_var][,init=gaussian|orthogonal|looks_linear|uniform|uniform_positive])
                                         Dense (defaults 1, 0, gaussian; keywords weight_var=, bias_var= too;
                                         entries of variance 1, uniform_positive on [0, 2 sqrt(3)])
  bn | bn(eps=E,mode=train|eval,centre=true|false,scale=G,shift=C,statistics=batch|population|reference)
                                         BatchNorm (defaults eps 0, mode train = statistics=batch, eval =
                                         statistics=population; reference: per neuron over a reference set;
                                         centred; no affine map unless scale/shift)
  ln | ln(eps=E,centre=true|false)       LayerNorm (centre=false: x / sqrt(mean x^2 + eps), no centring)
  rms | rms(eps=E,scale=G,shift=C)       RMSNorm: x / sqrt(mean x^2 + eps) over the features, the same as
                                         ln(centre=false) (no affine map unless scale/shift)
  res([alpha=A,][skip=LAYER,]LAYERS)     residual block skip(x) + A * branch(x), the branch a spec itself (A = 1;
                                         skip the identity, or a layer or a (group) such as dense)
  (LAYERS)                               a group
  PHI: relu, tanh(gamma=0.5), relu^1.5  an activation, spelled as for `bnsym predict --phi`

*N after a closing parenthesis repeats that unit (a group or a residual block); after a plain layer it repeats
every layer before it in its group. So "dense,bn,relu*20" is 20 blocks of (dense, bn, relu), "dense,res(bn,relu,
dense)*50" is a dense and 50 residual blocks, and "dense,(bn,relu,dense)*3,bn" repeats only the group.
The first layer must be a dense: it acts on the inputs, whose Gram matrix is the given Sigma0."""
