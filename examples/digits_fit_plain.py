"""A plain single-device Keras script (no autodist import) that ``autodist run`` distributes unchanged.

    python examples/digits_fit_plain.py --epochs 12                       # one device
    autodist run -r resource_specs/loopback_two_nodes.yml examples/digits_fit_plain.py --epochs 12

The CNN of ``examples/digits_fit.py`` on scikit-learn's handwritten digits,
built and compiled eagerly and trained with Keras' own ``fit``, ``evaluate``
and ``predict``. Under ``autodist run`` those three calls run on a twin of the
model in autodist's graph (``docs/keras.md``, "Unmodified scripts"): the
global batch of 64 is split over every replica of every node, the metrics are
the whole batch's, and afterwards the script's own model holds the trained
weights. Both ways print the same numbers: Keras' epoch lines (the chief's
only under ``autodist run``), then ``history`` (every epoch's loss and
accuracy), ``weights`` (a checksum per weight) and the test accuracy, which
every node prints. Measured: test accuracy 0.9639 after 12 epochs, alone and on
two loopback nodes under AllReduce.

``shuffle=False`` keeps the batches the same in both runs (the data is
shuffled once by the split): autodist's per-epoch shuffle draws its own
permutation, not Keras'.
"""
import argparse
import json
import sys

import numpy as np

from digits_cnn import build_model, digits


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=12)
    args = parser.parse_args()
    import keras

    x_train, x_test, y_train, y_test = digits()
    model = build_model(keras)
    model.compile(optimizer=keras.optimizers.Adam(2e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    history = model.fit(x_train, y_train, batch_size=64, epochs=args.epochs, validation_split=0.1, shuffle=False,
                        verbose=2, callbacks=[keras.callbacks.EarlyStopping(patience=3)]).history
    loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
    predicted = np.argmax(model.predict(x_test, verbose=0), axis=1)
    say("history " + json.dumps({key: [float(v) for v in values] for key, values in history.items()}))
    say("weights " + json.dumps([float(np.abs(w).sum()) for w in model.get_weights()]))
    say("test loss {:.4f}  test accuracy {:.4f}  (predict agrees: {:.4f})".format(
        loss, accuracy, float(np.mean(predicted == y_test))))


def say(line):
    """One write per line: under ``autodist run`` the chief's console also shows the other nodes' lines."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
