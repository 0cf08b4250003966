"""Keras models with their own ``train_step`` for the custom-step tests (no autodist import: scripts use it too)."""
import keras
import tensorflow as tf


class GuideStep(keras.Model):
    """The train_step of Keras' guide: compute_loss, then every metric, returning their results."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}
