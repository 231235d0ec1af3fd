"""Event-camera data plane (numpy, no rclpy).

batch.py (EventBatch), packet.py (EventPacketData, from_msg), decode.py (the EventPacket
stream decoder on the ROS clock: EVT3 by the evt3 library, evt2.py, evt21.py and
libcaer_cmp.py), clock.py (sensor->ROS time), encode.py (EVT3 packets), triggers.py,
bag.py (ROS 2 bags), dsec.py (DSEC events.h5), representations.py, errors.py.
"""

from crossspec_ros.events.batch import EventBatch

__all__ = ["EventBatch"]
