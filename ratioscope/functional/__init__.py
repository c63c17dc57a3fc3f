"""Pure tensor/array functions: no I/O, no printing, device-agnostic."""

from ratioscope.functional.covariance import covariance_weights as covariance_weights
from ratioscope.functional.quatro import quatro_duals as quatro_duals
